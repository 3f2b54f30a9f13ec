//! The Redis sliding window, shared by every replica: one sorted set per key
//! (member and score = request time), trimmed and counted by one atomic
//! script. Each call is bounded by a timeout, so a Redis that hangs answers
//! like a Redis that is down: 503.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redis::Script;
use redis::aio::ConnectionManager;
use uuid::Uuid;

use super::{LimiterError, RateLimiter, Verdict, retry_after};
use crate::config::RateLimit;
use crate::store::KeyId;

/// How long one limiter call may take before the request is refused.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// KEYS[1] = the key's window; ARGV = now (ms), window (ms), limit, member.
/// Returns {allowed (0/1), count after, oldest time in the window}.
const SCRIPT: &str = r#"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1] - ARGV[2])
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  count = count + 1
  allowed = 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {allowed, count, tonumber(oldest[2] or ARGV[1])}
"#;

/// A limiter whose windows live in Redis.
#[derive(Clone)]
pub struct RedisLimiter {
    limit: RateLimit,
    conn: ConnectionManager,
    script: Script,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url`. The connection manager reconnects by itself after
    /// an outage, so service resumes without a restart.
    pub async fn connect(url: &str, limit: RateLimit) -> Result<RedisLimiter, LimiterError> {
        let client = redis::Client::open(url).map_err(|e| LimiterError(e.to_string()))?;
        let conn = tokio::time::timeout(Duration::from_secs(5), ConnectionManager::new(client))
            .await
            .map_err(|_| LimiterError("timed out connecting to Redis".into()))?
            .map_err(|e| LimiterError(e.to_string()))?;
        Ok(RedisLimiter {
            limit,
            conn,
            script: Script::new(SCRIPT),
        })
    }

    /// Succeeds when Redis answers (readiness).
    pub async fn ping(&self) -> Result<(), LimiterError> {
        let mut conn = self.conn.clone();
        tokio::time::timeout(
            CALL_TIMEOUT,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        .map_err(|_| LimiterError("Redis ping timed out".into()))?
        .map_err(|e| LimiterError(e.to_string()))?;
        Ok(())
    }
}

#[async_trait]
impl RateLimiter for RedisLimiter {
    async fn check(&self, key: KeyId, now: DateTime<Utc>) -> Result<Verdict, LimiterError> {
        let now_ms = now.timestamp_millis();
        let window_ms = i64::try_from(self.limit.window.as_millis()).unwrap_or(i64::MAX);
        let mut conn = self.conn.clone();
        let mut call = self.script.key(format!("warden:rl:{}", key.0));
        call.arg(now_ms)
            .arg(window_ms)
            .arg(self.limit.requests)
            // Unique per request, so two requests in the same millisecond both count.
            .arg(format!("{now_ms}-{}", Uuid::new_v4().simple()));
        let (allowed, count, oldest): (i64, i64, i64) =
            tokio::time::timeout(CALL_TIMEOUT, call.invoke_async(&mut conn))
                .await
                .map_err(|_| LimiterError("Redis call timed out".into()))?
                .map_err(|e| LimiterError(e.to_string()))?;
        let max = self.limit.requests;
        let used = u32::try_from(count).unwrap_or(u32::MAX);
        Ok(Verdict {
            allowed: allowed == 1,
            limit: max,
            remaining: max.saturating_sub(used),
            retry_after_secs: if allowed == 1 {
                0
            } else {
                retry_after(now_ms, oldest + window_ms)
            },
        })
    }
}
