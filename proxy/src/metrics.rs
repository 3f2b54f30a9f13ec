//! The sidecar's Prometheus metrics: decisions by outcome, the latency the
//! sidecar adds, the bundle's age, and the telemetry queue.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use warden_engine::model::Decision;

/// Borrowed labels: counting a decision allocates nothing (route names are
/// interned once, at start, by [`Metrics::intern`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    route: &'static str,
    decision: &'static str,
    enforced: &'static str,
}

/// A route's decision counters (each outcome, enforced or not): counting is
/// one atomic add, with no label set hashed per decision. Every series
/// exists from the start, at zero.
#[derive(Debug, Clone)]
pub struct RouteDecisions([Counter; 2 * Decision::ALL.len()]);

impl RouteDecisions {
    pub fn count(&self, decision: Decision, enforced: bool) {
        let i = Decision::ALL
            .iter()
            .position(|d| *d == decision)
            .unwrap_or_default();
        self.0[2 * i + usize::from(enforced)].inc();
    }
}

/// The sidecar's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    added: Histogram,
    bundle_age: Gauge<i64, AtomicI64>,
    queue_depth: Gauge<i64, AtomicI64>,
    dropped: Counter,
    executions_skipped: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("warden_proxy");
        let decisions = Family::<DecisionLabels, Counter>::default();
        // 1 µs to ~0.5 s: a local decision takes microseconds, a held
        // approval up to two minutes (counted in the last bucket).
        let added = Histogram::new(exponential_buckets(0.000_001, 2.5, 16));
        let bundle_age = Gauge::<i64, AtomicI64>::default();
        let queue_depth = Gauge::<i64, AtomicI64>::default();
        let dropped = Counter::default();
        let executions_skipped = Counter::default();
        registry.register(
            "decisions",
            "Decisions by route and outcome",
            decisions.clone(),
        );
        registry.register(
            "added_latency_seconds",
            "Time the sidecar spent deciding before forwarding or answering",
            added.clone(),
        );
        registry.register(
            "bundle_age_seconds",
            "Seconds since the loaded bundle was last confirmed by the control plane (-1: none)",
            bundle_age.clone(),
        );
        registry.register(
            "telemetry_queue_depth",
            "Decisions waiting to be reported",
            queue_depth.clone(),
        );
        registry.register(
            "telemetry_dropped",
            "Decisions dropped from a full telemetry queue (oldest first)",
            dropped.clone(),
        );
        registry.register(
            "execution_events_skipped",
            "Execution outcomes not sent, to keep the key's rate budget for decisions",
            executions_skipped.clone(),
        );
        Metrics {
            registry,
            decisions,
            added,
            bundle_age,
            queue_depth,
            dropped,
            executions_skipped,
        }
    }

    /// A route name as a label: the routes are fixed for the process's
    /// life, so each name is leaked once instead of copied per decision.
    fn intern(name: &str) -> &'static str {
        Box::leak(name.to_owned().into_boxed_str())
    }

    /// One route's decision counters, every outcome resolved once.
    pub fn route_decisions(&self, route: &str) -> RouteDecisions {
        let route = Metrics::intern(route);
        RouteDecisions(std::array::from_fn(|i| {
            self.decisions
                .get_or_create(&DecisionLabels {
                    route,
                    decision: Decision::ALL[i / 2].as_str(),
                    enforced: if i % 2 == 1 { "true" } else { "false" },
                })
                .clone()
        }))
    }

    pub fn added(&self, d: Duration) {
        self.added.observe(d.as_secs_f64());
    }

    pub fn dropped(&self, n: u64) {
        self.dropped.inc_by(n);
    }

    pub fn executions_skipped(&self, n: u64) {
        self.executions_skipped.inc_by(n);
    }

    /// The text exposition, with the gauges read at scrape time.
    pub fn render(&self, bundle_age: Option<Duration>, queue_depth: usize) -> String {
        self.bundle_age
            .set(bundle_age.map_or(-1, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)));
        self.queue_depth
            .set(i64::try_from(queue_depth).unwrap_or(i64::MAX));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
