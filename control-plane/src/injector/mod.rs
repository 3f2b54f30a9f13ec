//! The sidecar injector: a Kubernetes mutating admission webhook served by
//! the control plane binary on its own TLS listener (`--injector-listen`).
//!
//! [`patch`] decides and builds the JSON Patch; this module serves it:
//! `POST /inject/namespace` and `POST /inject/pod` (the chart registers one
//! webhook per scope), `GET /healthz`. A review that cannot be read is answered `400`
//! with a JSON error; the API server then applies the webhook's failure
//! policy.

mod patch;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::metrics::Metrics;

pub use patch::{
    ADMIN_PORT, ANNOTATION_AGENT_ID, ANNOTATION_INJECT, ANNOTATION_KEY_SECRET, ANNOTATION_ROUTES,
    ANNOTATION_STATUS, CA_DIR, CONTAINER, MalformedReview, PROXY_PORT, Scope, SidecarTemplate,
    review,
};
pub use tls::ReloadingCert;

/// An admission review is a pod spec: 1 MiB is far above any real one.
const MAX_REVIEW_BYTES: usize = 1024 * 1024;

/// What the injector's handlers share.
#[derive(Debug)]
struct Injector {
    template: SidecarTemplate,
    metrics: Arc<Metrics>,
}

async fn inject(
    State(injector): State<Arc<Injector>>,
    Path(scope): Path<String>,
    body: Bytes,
) -> Response {
    let (scope, label) = match scope.as_str() {
        "pod" => (Scope::Pod, "pod"),
        "namespace" => (Scope::Namespace, "namespace"),
        other => {
            injector.metrics.admission("unknown", "malformed");
            return bad_request(&format!("scope must be namespace or pod, got `{other}`"));
        }
    };
    match review(&body, scope, &injector.template) {
        Ok(answer) => {
            let r = &answer["response"];
            let outcome = match (r["allowed"].as_bool(), r.get("patch").is_some()) {
                (Some(false), _) => "refused",
                (_, true) => "injected",
                _ => "skipped",
            };
            injector.metrics.admission(label, outcome);
            tracing::info!(
                uid = r["uid"].as_str().unwrap_or_default(),
                scope = label,
                outcome,
                "admission review"
            );
            axum::Json(answer).into_response()
        }
        Err(MalformedReview(why)) => {
            injector.metrics.admission(label, "malformed");
            bad_request(&why)
        }
    }
}

fn bad_request(why: &str) -> Response {
    tracing::warn!(why, "admission review refused");
    let body =
        json!({"error": "Invalid admission review", "code": "invalid_request", "detail": why});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn router(template: SidecarTemplate, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/inject/{scope}", post(inject))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(Arc::new(Injector { template, metrics }))
}

/// Serves the injector on `listener` until `shutdown` resolves, looking at
/// the certificate's files every `reload_every`. Reviews are counted in
/// `metrics` (the API's `/metrics` shows them).
pub async fn serve(
    template: SidecarTemplate,
    metrics: Arc<Metrics>,
    cert: Arc<ReloadingCert>,
    reload_every: Duration,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "injector listening on {addr}");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()?));
    let app = router(template, metrics);
    let mut reload = tokio::time::interval(reload_every);
    reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            _ = reload.tick() => {
                let cert = cert.clone();
                // File reads off the accept loop.
                let _ = tokio::task::spawn_blocking(move || cert.refresh()).await;
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "injector accept failed");
                    continue;
                }
            },
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        // Each connection's handshake runs on its own task: a slow client
        // never holds up the others.
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "injector TLS handshake failed");
                    return;
                }
            };
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    app.clone().oneshot(req.map(axum::body::Body::new))
                });
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "injector connection ended");
            }
        });
    }
    tracing::info!("injector stopped");
    Ok(())
}
