//! [`serve`]: the route listeners, the admin listener and the background
//! tasks (bundle puller, mode stream, telemetry), with graceful shutdown:
//! listeners stop accepting, in-flight requests finish, then telemetry is
//! flushed.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

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
    // The flusher stops last, once no request can queue a report.
    let (flush_stop_tx, flush_stop) = tokio::sync::watch::channel(false);
    let flusher = tokio::spawn(telemetry.clone().run(
        control.clone(),
        config.telemetry_flush,
        flush_stop,
        DRAIN,
    ));

    // The system's roots, read once: the upstream client trusts them, and
    // the forward proxy's CA bundle carries them for the agent.
    let system_roots = rustls_native_certs::load_native_certs().certs;
    let extra_ca = config
        .forward
        .as_ref()
        .and_then(|f| f.upstream_ca_file.clone());
    let ca = match &config.forward {
        Some(forward) => Some(Arc::new(crate::forward::ca::Ca::load_or_generate(
            &forward.ca_dir,
            &system_roots,
        )?)),
        None => None,
    };
    let shared = Shared {
        agent_id: config.agent_id.clone(),
        max_body_bytes: config.max_body_bytes,
        governor: governor.clone(),
        control: control.clone(),
        telemetry: telemetry.clone(),
        metrics: metrics.clone(),
    };

    // The serving threads: each has its own runtime, upstream pool and copy
    // of every route's service, so that a connection's request, its upstream
    // call and its response all run on one thread.
    let count = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let mut workers = Workers::default();
    for i in 0..count {
        let upstream = upstream_client(&system_roots, extra_ca.as_deref())?;
        let handlers = handlers(&config, &shared, &upstream, ca.as_ref());
        workers.start(i, handlers)?;
    }
    let workers = Arc::new(workers);

    let mut accepts = tokio::task::JoinSet::new();
    let mut route_listeners = listeners.routes.into_iter();
    let mut index = 0;
    for route in config.routes.iter().filter(|r| r.listen.is_some()) {
        let Some(listener) = route_listeners.next() else {
            anyhow::bail!("no listener bound for route {}", route.name);
        };
        let upstream = route
            .upstream
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        tracing::info!(route = %route.name, listen = %listener.local_addr()?, %upstream, workers = count, "route listening");
        accepts.spawn(dispatch(listener, index, workers.clone(), stop.clone()));
        index += 1;
    }
    if let (Some(forward), Some(listener)) = (&config.forward, listeners.forward) {
        tracing::info!(listen = %listener.local_addr()?, ca_dir = %forward.ca_dir.display(), "forward proxy listening");
        accepts.spawn(dispatch(listener, index, workers.clone(), stop.clone()));
    }
    let admin = Admin {
        governor: governor.clone(),
        metrics: metrics.clone(),
        telemetry: telemetry.clone(),
    };
    tracing::info!(listen = %listeners.admin.local_addr()?, "admin listening");
    let admin = Arc::new(admin);
    let graceful = Arc::new(GracefulShutdown::new());
    accepts.spawn(accept_loop(
        listeners.admin,
        move |req: Request<Incoming>| {
            let admin = admin.clone();
            async move { Ok::<_, Infallible>(admin.answer(&req)) }
        },
        graceful.clone(),
        stop.clone(),
    ));

    shutdown.await;
    tracing::info!("shutting down: draining in-flight requests");
    let _ = stop_tx.send(true);
    while accepts.join_next().await.is_some() {}
    // Every dispatcher has ended: this is the last handle, and dropping it
    // tells each worker to drain its connections and stop.
    if let Ok(workers) = Arc::try_unwrap(workers) {
        let _ = tokio::task::spawn_blocking(move || workers.join()).await;
    }
    // Every accept loop has ended, so this is the last handle.
    if let Ok(graceful) = Arc::try_unwrap(graceful)
        && tokio::time::timeout(DRAIN, graceful.shutdown())
            .await
            .is_err()
    {
        tracing::warn!("shutdown: some admin requests did not finish in time");
    }
    tasks.abort_all();
    let _ = flush_stop_tx.send(true);
    let _ = flusher.await;
    tracing::info!("stopped");
    Ok(())
}

/// What every worker's services share.
struct Shared {
    agent_id: String,
    max_body_bytes: usize,
    governor: Arc<Governor>,
    control: ControlPlane,
    telemetry: Arc<TelemetryQueue>,
    metrics: Arc<Metrics>,
}

/// What serves the connections of one listener.
#[derive(Clone)]
enum Handler {
    Route(Arc<RouteService>),
    /// The forward proxy: its connections may upgrade (on `CONNECT`) into
    /// long-lived tunnels, so shutdown does not wait for them.
    Forward(Arc<crate::forward::ForwardProxy>),
}

impl Handler {
    async fn handle(self, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        match self {
            Handler::Route(service) => service.handle(req).await,
            Handler::Forward(proxy) => proxy.handle(req).await,
        }
    }
}

/// One worker's handlers, in the listeners' order: the routes that listen,
/// then the forward proxy.
fn handlers(
    config: &Config,
    shared: &Shared,
    upstream: &crate::service::Upstream,
    ca: Option<&Arc<crate::forward::ca::Ca>>,
) -> Vec<Handler> {
    let mut handlers = Vec::new();
    let mut governed_hosts = Vec::new();
    for route in &config.routes {
        let service = Arc::new(RouteService {
            route: route.clone(),
            decisions: shared.metrics.route_decisions(&route.name),
            agent_id: shared.agent_id.clone(),
            max_body_bytes: shared.max_body_bytes,
            governor: shared.governor.clone(),
            control: shared.control.clone(),
            telemetry: shared.telemetry.clone(),
            metrics: shared.metrics.clone(),
            upstream: upstream.clone(),
        });
        for host in &route.hosts {
            governed_hosts.push((host.clone(), service.clone()));
        }
        if route.listen.is_some() {
            handlers.push(Handler::Route(service));
        }
    }
    if let Some(ca) = ca {
        handlers.push(Handler::Forward(Arc::new(
            crate::forward::ForwardProxy::new(governed_hosts, ca.clone(), upstream.clone()),
        )));
    }
    handlers
}

/// A connection for a worker: its listener's index and the socket.
type Accepted = (usize, std::net::TcpStream);

/// The serving threads, and the channels that hand them connections.
#[derive(Default)]
struct Workers {
    inboxes: Vec<tokio::sync::mpsc::UnboundedSender<Accepted>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: std::sync::atomic::AtomicUsize,
}

impl Workers {
    /// Starts worker `i`: a thread running a single-threaded runtime.
    fn start(&mut self, i: usize, handlers: Vec<Handler>) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a worker's runtime")?;
        let (inbox, conns) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name(format!("warden-worker-{i}"))
            .spawn(move || runtime.block_on(work(handlers, conns)))
            .context("cannot start a worker thread")?;
        self.inboxes.push(inbox);
        self.threads.push(thread);
        Ok(())
    }

    /// Hands a connection to the next worker in turn (an even spread: the
    /// kernel would give a burst of new connections to whichever thread
    /// woke first).
    fn give(&self, mut conn: Accepted) {
        let n = self.inboxes.len();
        let first = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for k in 0..n {
            match self.inboxes[(first + k) % n].send(conn) {
                Ok(()) => return,
                // That worker has stopped: try the next one.
                Err(tokio::sync::mpsc::error::SendError(back)) => conn = back,
            }
        }
        tracing::warn!("no worker left to serve a connection");
    }

    /// Closes the inboxes and waits for every worker to drain.
    fn join(self) {
        drop(self.inboxes);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// A worker: serves each connection it is given until its inbox closes,
/// then waits (at most [`DRAIN`]) for the requests in flight.
async fn work(handlers: Vec<Handler>, mut conns: tokio::sync::mpsc::UnboundedReceiver<Accepted>) {
    let graceful = GracefulShutdown::new();
    while let Some((index, stream)) = conns.recv().await {
        let (Some(handler), Ok(stream)) = (handlers.get(index), TcpStream::from_std(stream)) else {
            continue;
        };
        let forward = matches!(handler, Handler::Forward(_));
        let handler = handler.clone();
        let conn = hyper::server::conn::http1::Builder::new().serve_connection(
            TokioIo::new(stream),
            service_fn(move |req| handler.clone().handle(req)),
        );
        let served = if forward {
            conn.with_upgrades().boxed()
        } else {
            graceful.watch(conn).boxed()
        };
        tokio::spawn(async move {
            if let Err(e) = served.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: some requests did not finish in time");
    }
}

/// The next connection, or `None` once `stop` changes.
async fn accept_next(
    listener: &TcpListener,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<TcpStream> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => return Some(stream),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => return None,
        }
    }
}

/// Accepts connections on a listener until `stop`, handing each to a worker.
async fn dispatch(
    listener: TcpListener,
    index: usize,
    workers: Arc<Workers>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    while let Some(stream) = accept_next(&listener, &mut stop).await {
        let _ = stream.set_nodelay(true);
        match stream.into_std() {
            Ok(stream) => workers.give((index, stream)),
            Err(e) => tracing::warn!(error = %e, "cannot hand a connection to a worker"),
        }
    }
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

/// Accepts the admin listener's connections until `stop`, serving each with
/// `handler` on this runtime; shutdown waits for their requests.
async fn accept_loop<F, Fut>(
    listener: TcpListener,
    handler: F,
    graceful: Arc<GracefulShutdown>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    while let Some(stream) = accept_next(&listener, &mut stop).await {
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service_fn(handler.clone()));
        let watched = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = watched.await {
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
