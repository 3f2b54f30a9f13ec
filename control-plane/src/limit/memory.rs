//! The in-process sliding window: for each key, the times of its requests in
//! the current window.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{LimiterError, RateLimiter, Verdict, retry_after};
use crate::config::RateLimit;
use crate::store::KeyId;

/// Windows are swept of idle keys every this many checks.
const SWEEP_EVERY: u64 = 10_000;

/// A limiter for one replica.
#[derive(Debug)]
pub struct MemoryLimiter {
    limit: RateLimit,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Request times (ms since the epoch), oldest first, at most `limit` of them.
    windows: HashMap<KeyId, VecDeque<i64>>,
    checks: u64,
}

impl MemoryLimiter {
    pub fn new(limit: RateLimit) -> MemoryLimiter {
        MemoryLimiter {
            limit,
            state: Mutex::new(State::default()),
        }
    }
}

#[async_trait]
impl RateLimiter for MemoryLimiter {
    async fn check(&self, key: KeyId, now: DateTime<Utc>) -> Result<Verdict, LimiterError> {
        let now_ms = now.timestamp_millis();
        let window_ms = i64::try_from(self.limit.window.as_millis()).unwrap_or(i64::MAX);
        let max = self.limit.requests;
        let mut state = self
            .state
            .lock()
            .map_err(|_| LimiterError("in-process limiter poisoned".into()))?;
        state.checks += 1;
        if state.checks % SWEEP_EVERY == 0 {
            state
                .windows
                .retain(|_, w| w.back().is_some_and(|&t| t > now_ms - window_ms));
        }
        let times = state.windows.entry(key).or_default();
        while times.front().is_some_and(|&t| t <= now_ms - window_ms) {
            times.pop_front();
        }
        let used = u32::try_from(times.len()).unwrap_or(u32::MAX);
        if used >= max {
            let oldest = times.front().copied().unwrap_or(now_ms);
            return Ok(Verdict {
                allowed: false,
                limit: max,
                remaining: 0,
                retry_after_secs: retry_after(now_ms, oldest + window_ms),
            });
        }
        times.push_back(now_ms);
        Ok(Verdict {
            allowed: true,
            limit: max,
            remaining: max - used - 1,
            retry_after_secs: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeDelta;
    use uuid::Uuid;

    use super::*;

    #[tokio::test]
    async fn the_window_slides() {
        let l = MemoryLimiter::new(RateLimit {
            requests: 3,
            window: Duration::from_secs(10),
        });
        let k = KeyId(Uuid::new_v4());
        let t0 = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        assert_eq!(l.check(k, at(0)).await.unwrap().remaining, 2);
        assert_eq!(l.check(k, at(1)).await.unwrap().remaining, 1);
        assert_eq!(l.check(k, at(2)).await.unwrap().remaining, 0);
        let refused = l.check(k, at(3)).await.unwrap();
        assert!(!refused.allowed);
        assert_eq!(
            refused.retry_after_secs, 7,
            "the first request leaves the window at t=10"
        );
        // Another key has its own window.
        assert!(l.check(KeyId(Uuid::new_v4()), at(3)).await.unwrap().allowed);
        // At t=10 the first request has left the window: one slot.
        let again = l.check(k, at(10)).await.unwrap();
        assert!(again.allowed);
        assert_eq!(again.remaining, 0);
    }
}
