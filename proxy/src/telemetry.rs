//! The telemetry queue: every decision is reported to the control plane in
//! batches of up to 100 (`POST /allow/telemetry`), flushed when a batch is
//! full or every flush interval, retried with backoff while the control
//! plane is down. The queue is bounded: when full, the oldest report is
//! dropped and counted. Pushing never blocks and never waits on the
//! network, so the agent's request is never slowed by reporting.
//!
//! Execution outcomes ride with their decision and are sent after the
//! batch that carries it was accepted (the control plane must know the
//! decision before it can take its outcome).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::control::{ControlPlane, ExecutionEvent, TelemetryItem};
use crate::metrics::Metrics;

/// The most items one `POST /allow/telemetry` carries (spec 4.2).
pub const BATCH: usize = 100;

/// Requests of the key's rate window (spec §8: 600 per 60 s) that execution
/// outcomes leave to the decisions' batches, the bundle pulls and the
/// approval polls.
pub const RATE_RESERVE: u64 = 100;

/// A batch's items, serialized in place (the reports are not cloned).
struct Items<'a>(&'a [Report]);

impl serde::Serialize for Items<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|r| &r.item))
    }
}

/// A decision to report, with the upstream's outcome when it was forwarded.
#[derive(Debug, Clone)]
pub struct Report {
    pub item: TelemetryItem,
    pub execution: Option<ExecutionEvent>,
}

/// The bounded queue of one sidecar.
#[derive(Debug)]
pub struct TelemetryQueue {
    items: Mutex<VecDeque<Report>>,
    capacity: usize,
    full_batch: Notify,
    metrics: Arc<Metrics>,
}

impl TelemetryQueue {
    pub fn new(capacity: usize, metrics: Arc<Metrics>) -> TelemetryQueue {
        TelemetryQueue {
            items: Mutex::new(VecDeque::new()),
            capacity,
            full_batch: Notify::new(),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Report>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a report; drops the oldest when full.
    pub fn push(&self, report: Report) {
        let len = {
            let mut q = self.lock();
            if q.len() >= self.capacity {
                q.pop_front();
                self.metrics.dropped(1);
            }
            q.push_back(report);
            q.len()
        };
        if len >= BATCH {
            self.full_batch.notify_one();
        }
    }

    pub fn depth(&self) -> usize {
        self.lock().len()
    }

    fn take(&self) -> Vec<Report> {
        let mut q = self.lock();
        let n = q.len().min(BATCH);
        q.drain(..n).collect()
    }

    /// Puts an unsent batch back in front, keeping the bound (the oldest
    /// beyond it are dropped).
    fn put_back(&self, batch: Vec<Report>) {
        let mut q = self.lock();
        for r in batch.into_iter().rev() {
            q.push_front(r);
        }
        let over = q.len().saturating_sub(self.capacity);
        if over > 0 {
            q.drain(..over);
            self.metrics.dropped(over as u64);
        }
    }

    /// Sends one batch; false if it must be retried.
    async fn send_one(&self, control: &ControlPlane) -> bool {
        let batch = self.take();
        if batch.is_empty() {
            return true;
        }
        let mut left = match control.telemetry(&Items(&batch)).await {
            Ok(left) => left,
            Err(e) => {
                tracing::warn!(error = %e, items = batch.len(), "telemetry not delivered; will retry");
                self.put_back(batch);
                return false;
            }
        };
        // Each outcome is a request of its own, under the same key as the
        // decisions: it is sent only while the key's window keeps a reserve
        // for the decisions that follow.
        let mut skipped = 0_u64;
        for event in batch.iter().filter_map(|r| r.execution.as_ref()) {
            if left.is_some_and(|n| n <= RATE_RESERVE) {
                skipped += 1;
                continue;
            }
            match control.execution(event).await {
                Ok(now) => left = now.or(left),
                // The decision is stored; only its outcome is lost.
                Err(e) => tracing::warn!(error = %e, "execution event not delivered"),
            }
        }
        if skipped > 0 {
            self.metrics.executions_skipped(skipped);
            tracing::warn!(
                skipped,
                "execution outcomes not sent: the key's rate budget is kept for decisions"
            );
        }
        true
    }

    /// Flushes on a full batch or every `interval` until `stop`, backing off
    /// (doubling to 30 s) while deliveries fail; then drains what is left,
    /// for at most `drain_for`.
    pub async fn run(
        self: Arc<Self>,
        control: ControlPlane,
        interval: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
        drain_for: Duration,
    ) {
        let mut backoff = interval;
        let mut failing = false;
        loop {
            // A full batch goes at once, unless deliveries are failing: then
            // only the backoff's timer wakes the flusher (a full queue must
            // not turn retries into a busy loop).
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.full_batch.notified(), if !failing => {}
                _ = stop.changed() => break,
            }
            let mut delivered = true;
            while self.depth() > 0 {
                if !self.send_one(&control).await {
                    delivered = false;
                    break;
                }
                if self.depth() < BATCH {
                    break;
                }
            }
            failing = !delivered;
            backoff = if delivered {
                interval
            } else {
                (backoff * 2).min(Duration::from_secs(30))
            };
        }
        let drained = tokio::time::timeout(drain_for, async {
            while self.depth() > 0 {
                if !self.send_one(&control).await {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = self.depth(),
                "shutdown: telemetry not fully delivered"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: u32) -> Report {
        Report {
            item: TelemetryItem {
                decision_id: uuid::Uuid::new_v4(),
                agent_id: "a".into(),
                target_app: "t".into(),
                action: format!("call_{n}"),
                decision: "permit",
                reason: String::new(),
                evaluated_at: chrono::Utc::now(),
                rule_id: None,
                rule_code: None,
                enforced: true,
                agent_mode: "enforce",
                evaluation_mode: "local",
                latency_ms: 0.0,
                context: None,
            },
            execution: None,
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts() {
        let q = TelemetryQueue::new(3, Arc::new(Metrics::new()));
        for n in 0..5 {
            q.push(report(n));
        }
        let left: Vec<String> = q.take().into_iter().map(|r| r.item.action).collect();
        assert_eq!(left, ["call_2", "call_3", "call_4"]);
        let text = q.metrics.render(None, 0);
        assert!(
            text.contains("warden_proxy_telemetry_dropped_total 2"),
            "{text}"
        );
    }

    #[test]
    fn an_unsent_batch_goes_back_in_front() {
        let q = TelemetryQueue::new(10, Arc::new(Metrics::new()));
        for n in 0..3 {
            q.push(report(n));
        }
        let batch = q.take();
        q.push(report(9));
        q.put_back(batch);
        let order: Vec<String> = q.take().into_iter().map(|r| r.item.action).collect();
        assert_eq!(order, ["call_0", "call_1", "call_2", "call_9"]);
    }
}
