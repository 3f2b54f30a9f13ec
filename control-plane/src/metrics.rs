//! Prometheus metrics: request counts and latency by route and status.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

/// The method as a label: the standard ones by name, any other as `other`
/// (a client can send any token as a method; each would be a new series).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AdmissionLabels {
    scope: &'static str,
    outcome: &'static str,
}

/// The server's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    admissions: Family<AdmissionLabels, Counter>,
    batch_rows: Histogram,
    commit_seconds: Histogram,
    flush_seconds: Histogram,
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
        let mut registry = Registry::with_prefix("warden");
        let requests = Family::<RequestLabels, Counter>::default();
        // 100 µs to ~3 s.
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            latency.clone(),
        );
        let admissions = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "injector_admission_reviews",
            "Admission reviews answered by the sidecar injector, by scope and outcome \
             (injected, skipped, refused, malformed)",
            admissions.clone(),
        );
        // 1 to 256 rows (the sink's largest batch).
        let batch_rows = Histogram::new(exponential_buckets(1.0, 2.0, 9));
        registry.register(
            "decision_batch_rows",
            "Decisions stored together in one commit (group commit)",
            batch_rows.clone(),
        );
        // 50 µs to ~100 ms.
        let commit_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 12));
        registry.register(
            "decision_commit_seconds",
            "Time to commit one group of decisions",
            commit_seconds.clone(),
        );
        let flush_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 12));
        registry.register(
            "decision_flush_seconds",
            "Time a committed group waited for its log flush (SQLite; PostgreSQL's commit includes it)",
            flush_seconds.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            admissions,
            batch_rows,
            commit_seconds,
            flush_seconds,
        }
    }

    /// Counts one admission review of the sidecar injector.
    pub fn admission(&self, scope: &'static str, outcome: &'static str) {
        self.admissions
            .get_or_create(&AdmissionLabels { scope, outcome })
            .inc();
    }

    /// Records the size of one group commit.
    pub fn batch(&self, rows: usize) {
        self.batch_rows.observe(rows as f64);
    }

    /// Records how long one group commit took.
    pub fn commit(&self, elapsed: Duration) {
        self.commit_seconds.observe(elapsed.as_secs_f64());
    }

    /// Records how long a committed group waited for its log flush.
    pub fn flush(&self, elapsed: Duration) {
        self.flush_seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts one request; `method` comes from [`method_label`], `route` is
    /// the router's template (a fixed set).
    pub fn observe(&self, method: &'static str, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route: route.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                method,
                route: route.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
