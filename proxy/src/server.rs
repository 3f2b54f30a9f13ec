//! [`serve`]: the route listeners, the admin listener and the background
//! tasks (bundle puller, mode stream, telemetry), with graceful shutdown:
//! listeners stop accepting, in-flight requests finish, then telemetry is
//! flushed.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use warden_engine::model::AgentMode;

use crate::config::Config;
use crate::control::ControlPlane;
use crate::governor::Governor;
use crate::metrics::Metrics;
use crate::service::{Body, RouteService, full};
use crate::telemetry::TelemetryQueue;

/// How long shutdown waits for in-flight requests, then for telemetry.
const DRAIN: Duration = Duration::from_secs(10);

/// The sockets [`serve`] accepts on, bound by the caller (port 0 in tests).
#[derive(Debug)]
pub struct Listeners {
    pub admin: TcpListener,
    /// One per route with a `listen` address, in the configuration's order.
    pub routes: Vec<TcpListener>,
    /// The forward proxy's, when configured.
    pub forward: Option<TcpListener>,
}

impl Listeners {
    /// Binds every address `config` names.
    pub async fn bind(config: &Config) -> std::io::Result<Listeners> {
        let admin = TcpListener::bind(config.admin_listen).await?;
        let mut routes = Vec::new();
        for addr in config.routes.iter().filter_map(|r| r.listen) {
            routes.push(TcpListener::bind(addr).await?);
        }
        let forward = match &config.forward {
            Some(f) => Some(TcpListener::bind(f.listen).await?),
            None => None,
        };
        Ok(Listeners {
            admin,
            routes,
            forward,
        })
    }
}

/// Runs the sidecar until `shutdown` resolves.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let governor = Arc::new(Governor::new());
    let control = ControlPlane::new(&config.control_plane, &config.key, &config.agent_id);
    let telemetry = Arc::new(TelemetryQueue::new(config.telemetry_queue, metrics.clone()));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(
        governor
            .clone()
            .run_puller(control.clone(), config.bundle_interval, stop.clone()),
    );
    tasks.spawn(
        governor
            .clone()
            .run_mode_stream(control.clone(), stop.clone()),
    );
    let flusher = tokio::spawn(telemetry.clone().run(
        control.clone(),
        config.telemetry_flush,
        stop.clone(),
        DRAIN,
    ));

    // The system's roots, read once: the upstream client trusts them, and
    // the forward proxy's CA bundle carries them for the agent.
    let system_roots = rustls_native_certs::load_native_certs().certs;
    let upstream = upstream_client(
        &system_roots,
        config
            .forward
            .as_ref()
            .and_then(|f| f.upstream_ca_file.as_deref()),
    )?;
    let graceful = Arc::new(GracefulShutdown::new());
    let mut accepts = tokio::task::JoinSet::new();
    let mut route_listeners = listeners.routes.into_iter();
    let mut governed_hosts = Vec::new();
    for route in &config.routes {
        let service = Arc::new(RouteService {
            route: route.clone(),
            route_label: Metrics::intern(&route.name),
            agent_id: config.agent_id.clone(),
            max_body_bytes: config.max_body_bytes,
            governor: governor.clone(),
            control: control.clone(),
            telemetry: telemetry.clone(),
            metrics: metrics.clone(),
            upstream: upstream.clone(),
        });
        for host in &route.hosts {
            governed_hosts.push((host.clone(), service.clone()));
        }
        if route.listen.is_none() {
            continue;
        }
        let Some(listener) = route_listeners.next() else {
            anyhow::bail!("no listener bound for route {}", route.name);
        };
        let upstream = route
            .upstream
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        tracing::info!(route = %route.name, listen = %listener.local_addr()?, %upstream, "route listening");
        let handler = move |req: Request<Incoming>| service.clone().handle(req);
        accepts.spawn(accept_loop(
            listener,
            handler,
            Some(graceful.clone()),
            stop.clone(),
        ));
    }
    if let (Some(forward), Some(listener)) = (&config.forward, listeners.forward) {
        let ca = Arc::new(crate::forward::ca::Ca::load_or_generate(
            &forward.ca_dir,
            &system_roots,
        )?);
        let proxy = Arc::new(crate::forward::ForwardProxy::new(
            governed_hosts,
            ca,
            upstream.clone(),
        ));
        tracing::info!(listen = %listener.local_addr()?, ca_dir = %forward.ca_dir.display(), "forward proxy listening");
        let handler = move |req: Request<Incoming>| proxy.clone().handle(req);
        accepts.spawn(accept_loop(listener, handler, None, stop.clone()));
    }
    let admin = Admin {
        governor: governor.clone(),
        metrics: metrics.clone(),
        telemetry: telemetry.clone(),
    };
    tracing::info!(listen = %listeners.admin.local_addr()?, "admin listening");
    let admin = Arc::new(admin);
    accepts.spawn(accept_loop(
        listeners.admin,
        move |req: Request<Incoming>| {
            let admin = admin.clone();
            async move { Ok::<_, Infallible>(admin.answer(&req)) }
        },
        Some(graceful.clone()),
        stop.clone(),
    ));

    shutdown.await;
    tracing::info!("shutting down: draining in-flight requests");
    let _ = stop_tx.send(true);
    while accepts.join_next().await.is_some() {}
    // Every accept loop has ended, so this is the last handle.
    if let Ok(graceful) = Arc::try_unwrap(graceful)
        && tokio::time::timeout(DRAIN, graceful.shutdown())
            .await
            .is_err()
    {
        tracing::warn!("shutdown: some requests did not finish in time");
    }
    tasks.abort_all();
    let _ = flusher.await;
    tracing::info!("stopped");
    Ok(())
}

/// The upstream pool: plain HTTP, and HTTPS verified against the system
/// roots plus `extra_ca` (a PEM bundle).
fn upstream_client(
    system_roots: &[rustls_pki_types::CertificateDer<'static>],
    extra_ca: Option<&std::path::Path>,
) -> anyhow::Result<crate::service::Upstream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in system_roots {
        // A system certificate rustls cannot use is skipped, as browsers do.
        let _ = roots.add(cert.clone());
    }
    if let Some(path) = extra_ca {
        use rustls_pki_types::pem::PemObject;
        let certs = rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| {
            anyhow::anyhow!("forward_proxy.upstream_ca_file {}: {e}", path.display())
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                anyhow::anyhow!("forward_proxy.upstream_ca_file {}: {e}", path.display())
            })?;
            roots.add(cert)?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // A decided call goes up at once: no Nagle delay on small writes.
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https),
    )
}

/// Accepts connections until `stop`, serving each with `handler`. With
/// `graceful`, shutdown waits for the connections' requests; without it
/// (the forward proxy, whose connections may upgrade on `CONNECT` into
/// long-lived tunnels), shutdown only stops accepting.
async fn accept_loop<F, Fut>(
    listener: TcpListener,
    handler: F,
    graceful: Option<Arc<GracefulShutdown>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service_fn(handler.clone()));
        let graceful = graceful.clone();
        tokio::spawn(async move {
            let result = match graceful {
                Some(g) => g.watch(conn).await,
                None => conn.with_upgrades().await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}

/// `/healthz`, `/readyz`, `/metrics`.
struct Admin {
    governor: Arc<Governor>,
    metrics: Arc<Metrics>,
    telemetry: Arc<TelemetryQueue>,
}

impl Admin {
    fn answer(&self, req: &Request<Incoming>) -> Response<Body> {
        let (status, content_type, body) = match req.uri().path() {
            "/healthz" => (
                StatusCode::OK,
                "application/json",
                r#"{"status":"ok"}"#.to_owned(),
            ),
            "/readyz" if self.governor.ready() => (
                StatusCode::OK,
                "application/json",
                serde_json::json!({
                    "status": "ready",
                    "bundle_version": self.governor.bundle_version(),
                    "agent_mode": self.governor.confirmed_mode().map(AgentMode::as_str),
                })
                .to_string(),
            ),
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "application/json",
                r#"{"status":"starting"}"#.to_owned(),
            ),
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics
                    .render(self.governor.bundle_age(), self.telemetry.depth()),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "application/json",
                r#"{"error":"not found","code":"not_found"}"#.to_owned(),
            ),
        };
        let mut resp = Response::new(full(body));
        *resp.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp
    }
}
