//! The sidecar injector: a Kubernetes mutating admission webhook served by
//! the control plane binary on its own TLS listener (`--injector-listen`).
//!
//! [`patch`] decides and builds the JSON Patch; this module serves it:
//! `POST /inject/namespace` and `POST /inject/pod` (the chart registers one
//! webhook per scope), `GET /healthz`. A review that cannot be read is answered `400`
//! with a JSON error; the API server then applies the webhook's failure
//! policy.

mod patch;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
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

pub use patch::{
    ADMIN_PORT, ANNOTATION_AGENT_ID, ANNOTATION_INJECT, ANNOTATION_KEY_SECRET, ANNOTATION_ROUTES,
    ANNOTATION_STATUS, CA_DIR, CONTAINER, MalformedReview, PROXY_PORT, Scope, SidecarTemplate,
    review,
};

/// An admission review is a pod spec: 1 MiB is far above any real one.
const MAX_REVIEW_BYTES: usize = 1024 * 1024;

async fn inject(
    State(template): State<Arc<SidecarTemplate>>,
    Path(scope): Path<String>,
    body: Bytes,
) -> Response {
    let scope = match scope.as_str() {
        "pod" => Scope::Pod,
        "namespace" => Scope::Namespace,
        other => {
            return bad_request(&format!("scope must be namespace or pod, got `{other}`"));
        }
    };
    match review(&body, scope, &template) {
        Ok(answer) => {
            let r = &answer["response"];
            tracing::info!(
                uid = r["uid"].as_str().unwrap_or_default(),
                allowed = r["allowed"].as_bool().unwrap_or_default(),
                patched = r.get("patch").is_some(),
                "admission review"
            );
            axum::Json(answer).into_response()
        }
        Err(MalformedReview(why)) => bad_request(&why),
    }
}

fn bad_request(why: &str) -> Response {
    tracing::warn!(why, "admission review refused");
    let body =
        json!({"error": "Invalid admission review", "code": "invalid_request", "detail": why});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn router(template: SidecarTemplate) -> Router {
    Router::new()
        .route("/inject/{scope}", post(inject))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(Arc::new(template))
}

/// The TLS configuration from a PEM certificate chain and key.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the injector's certificate and key do not match")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves the injector on `listener` with `tls` until `shutdown` resolves.
pub async fn serve(
    template: SidecarTemplate,
    tls: rustls::ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "injector listening on {addr}");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let app = router(template);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
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
