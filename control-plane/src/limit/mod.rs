//! Rate limiting (spec §8): a sliding window of N requests per window per
//! key. Two stores: in-process (one replica) and Redis (shared by replicas).
//! A limiter that cannot answer fails closed: the caller answers 503.

mod memory;
mod redis;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use memory::MemoryLimiter;
pub use redis::RedisLimiter;

use crate::store::KeyId;

/// The limiter's answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The window's size in requests (`X-RateLimit-Limit`).
    pub limit: u32,
    /// Requests left in the window after this one (`X-RateLimit-Remaining`).
    pub remaining: u32,
    /// When refused: whole seconds until a slot frees (`Retry-After`).
    pub retry_after_secs: u64,
}

/// The limiter could not answer (its store is down).
#[derive(Debug, thiserror::Error)]
#[error("rate limiter unavailable: {0}")]
pub struct LimiterError(pub String);

/// A sliding-window limiter keyed by API key.
#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Counts a request of `key` at `now` if the window has room.
    async fn check(&self, key: KeyId, now: DateTime<Utc>) -> Result<Verdict, LimiterError>;
}

/// Seconds, rounded up, from `now` until `until` (at least 1 when refused).
fn retry_after(now_ms: i64, until_ms: i64) -> u64 {
    let ms = (until_ms - now_ms).max(0) as u64;
    ms.div_ceil(1000).max(1)
}
