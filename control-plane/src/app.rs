//! The server: shared state, the middleware stack, and [`serve`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::error::ApiError;
use crate::limit::{MemoryLimiter, RateLimiter, RedisLimiter};
use crate::metrics::Metrics;
use crate::store::{self, ApiKey, KeyId, Store};

/// How often coalesced key uses are written.
const TOUCH_FLUSH: std::time::Duration = std::time::Duration::from_millis(500);

/// Management-key use of `/api/...` updates `last_used_at` at most this often.
const API_TOUCH_INTERVAL: TimeDelta = TimeDelta::seconds(60);

/// What every handler can reach. Cloned for every extractor of every
/// request, so it is one `Arc` (one reference count), not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct Shared {
    pub store: Arc<dyn Store>,
    pub limiter: Arc<dyn RateLimiter>,
    /// Set when the limiter is Redis, for readiness.
    pub redis: Option<RedisLimiter>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
    /// Compiled policy sets by organization and agent.
    pub policies: Arc<crate::evaluate::PolicyCache>,
    /// Mode changes for the stream's subscribers in this process.
    pub modes: tokio::sync::broadcast::Sender<crate::store::ModeEvent>,
    /// Where decisions go: group-committed to the store, then recorded.
    pub sink: Arc<crate::sink::DecisionSink>,
    /// When each key last had `last_used_at` written for an `/api/...` call.
    api_touches: Arc<Mutex<HashMap<KeyId, DateTime<Utc>>>>,
    /// Key uses not written yet: the latest per key.
    pending_touches: Arc<Mutex<HashMap<KeyId, DateTime<Utc>>>>,
    /// Set when the server begins to stop: long-lived responses (the mode
    /// stream) end, so that graceful shutdown does not wait on them.
    pub stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl AppState {
    /// Opens the store (running migrations) and the limiter `config` names.
    pub async fn open(config: Config) -> anyhow::Result<AppState> {
        if let Some(path) = config.sqlite_path()
            && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", dir.display()))?;
        }
        let store = store::open(&config.database_url).await?;
        let (limiter, redis): (Arc<dyn RateLimiter>, _) = match &config.redis_url {
            Some(url) => {
                let redis = RedisLimiter::connect(url, config.rate_limit).await?;
                (Arc::new(redis.clone()), Some(redis))
            }
            None => (Arc::new(MemoryLimiter::new(config.rate_limit)), None),
        };
        let metrics = Arc::new(Metrics::new());
        let sink = Arc::new(crate::sink::DecisionSink::start(
            store.clone(),
            Arc::new(crate::record::LogRecorder),
            metrics.clone(),
        ));
        let (modes, _) = tokio::sync::broadcast::channel(1024);
        // Replicas sharing PostgreSQL hear each other's changes.
        store.listen(modes.clone());
        let state = AppState(Arc::new(Shared {
            modes,
            store,
            limiter,
            redis,
            metrics,
            config: Arc::new(config),
            policies: Arc::default(),
            sink,
            api_touches: Arc::default(),
            pending_touches: Arc::default(),
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
        }));
        state.spawn_touch_flusher();
        Ok(state)
    }

    /// Announces a mode change to every subscriber: through the database
    /// when it relays between replicas, else in this process only.
    pub async fn announce_mode(&self, event: crate::store::ModeEvent) {
        match self.store.announce_mode(&event).await {
            Ok(true) => {}
            Ok(false) => {
                let _ = self.modes.send(event);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not announce a mode change to other replicas");
                let _ = self.modes.send(event);
            }
        }
    }

    /// Records that `key` was used for `path` (spec 2.1 "Last Used"): on
    /// every request, except `/api/...`, where at most once per 60 s. Uses
    /// are coalesced per key and written off the request path within
    /// [`TOUCH_FLUSH`] (the latest use wins).
    pub fn touch(&self, key: &ApiKey, path: &str, now: DateTime<Utc>) {
        if path.starts_with("/api/") {
            let Ok(mut seen) = self.api_touches.lock() else {
                return;
            };
            if seen
                .get(&key.id)
                .is_some_and(|t| now - *t < API_TOUCH_INTERVAL)
            {
                return;
            }
            seen.insert(key.id, now);
        }
        if let Ok(mut pending) = self.pending_touches.lock() {
            let t = pending.entry(key.id).or_insert(now);
            *t = (*t).max(now);
        }
    }

    /// Writes the coalesced key uses every [`TOUCH_FLUSH`] until the
    /// process ends.
    fn spawn_touch_flusher(&self) {
        let (store, pending) = (self.store.clone(), self.pending_touches.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TOUCH_FLUSH);
            loop {
                tick.tick().await;
                let due: Vec<(KeyId, DateTime<Utc>)> = match pending.lock() {
                    Ok(mut p) => p.drain().collect(),
                    Err(_) => continue,
                };
                for (id, at) in due {
                    if let Err(e) = store.touch_key(id, at).await {
                        tracing::warn!(error = %e, "could not record key use");
                    }
                }
            }
        });
    }
}

/// The whole application: routes, then the layers every request passes.
pub fn router(state: AppState) -> Router {
    crate::routes::build(state.clone())
        .fallback(|| async { ApiError::NotFound })
        // Outermost: count and time every request by its route template.
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        // A panic in a handler becomes a 500 envelope instead of a dropped connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::Internal("handler panicked".into()).into_response()
        }))
        .with_state(state)
}

/// Serves `state` on `listener` until `shutdown` resolves.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, database = %crate::config::redact_url(&state.config.database_url), "listening on {addr}");
    let stopping = state.stopping.clone();
    let app = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Streams end now; requests in flight finish.
            stopping.send_replace(true);
        })
        .await?;
    tracing::info!("stopped");
    Ok(())
}

/// Metrics and the access log, by route template (never the raw path, which
/// may hold ids; never headers, which hold keys).
async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = crate::metrics::method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = next.run(req).await;
    let status = response.status();
    let elapsed = start.elapsed();
    state
        .metrics
        .observe(method, &route, status.as_u16(), elapsed);
    if status.is_server_error() {
        tracing::warn!(
            method,
            route,
            status = status.as_u16(),
            ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
    } else {
        tracing::info!(
            method,
            route,
            status = status.as_u16(),
            ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
    }
    response
}
