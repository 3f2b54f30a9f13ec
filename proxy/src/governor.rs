//! The sidecar's policy state: the engine's fail-closed [`ClientState`]
//! (spec §9), kept current by two background tasks: the bundle puller
//! (`GET /rules/bundle` every few seconds with `If-None-Match`) and the
//! mode stream (`mode_changed` applies at once).
//!
//! Requests only take the read lock, for the microseconds a decision takes.
//! A new bundle is parsed and compiled under the read lock too
//! ([`ClientState::prepare`]); the write lock is held only to swap it in.
//! A failed pull keeps the last good bundle; a refused one fails closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use warden_engine::Verdict;
use warden_engine::client::ClientState;
use warden_engine::model::{ActionInput, AgentMode, Facet, RetrievalInput};

use crate::control::{BundlePull, ControlPlane};

/// The policy state of one sidecar.
#[derive(Debug, Default)]
pub struct Governor {
    state: RwLock<ClientState>,
    /// Set once the first pull settled the state: a bundle loaded or
    /// refused, or the control plane unreachable (the fail-closed table).
    settled: AtomicBool,
    /// When the control plane last confirmed the bundle we hold.
    confirmed_at: Mutex<Option<Instant>>,
}

impl Governor {
    pub fn new() -> Governor {
        Governor::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ClientState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ClientState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn decide_action(&self, input: &ActionInput) -> Verdict {
        self.read().decide_action(input)
    }

    pub fn decide_retrieval(&self, input: &RetrievalInput) -> Verdict {
        self.read().decide_retrieval(input, Utc::now())
    }

    /// A call whose payload cannot be read: fail closed when enforcing.
    pub fn decide_unjudgeable(&self, facet: Facet, why: &str) -> Verdict {
        self.read().decide_unjudgeable(facet, why)
    }

    /// Ready: the first pull settled what the sidecar does.
    pub fn ready(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Since the control plane last confirmed the bundle held.
    pub fn bundle_age(&self) -> Option<Duration> {
        let loaded = self.read().bundle_version().is_some();
        let at = *self.confirmed_at.lock().unwrap_or_else(|p| p.into_inner());
        at.filter(|_| loaded).map(|t| t.elapsed())
    }

    /// The loaded bundle's version.
    pub fn bundle_version(&self) -> Option<String> {
        self.read().bundle_version().map(str::to_owned)
    }

    /// The mode the control plane last confirmed (`None` before it did).
    pub fn confirmed_mode(&self) -> Option<AgentMode> {
        self.read().confirmed_mode()
    }

    fn confirmed_now(&self) {
        *self.confirmed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Installs a bundle body: compiled under the read lock, swapped under
    /// the write lock.
    fn install(&self, body: &[u8]) -> bool {
        let prepared = self.read().prepare(body);
        match self.write().apply(prepared) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "bundle refused; failing closed as spec §9 says");
                false
            }
        }
    }

    /// Applies a mode the control plane announced.
    pub fn set_mode(&self, mode: AgentMode) {
        self.write().set_mode(mode);
    }

    /// One bundle pull; returns the `ETag` to send next time.
    pub async fn pull(&self, control: &ControlPlane, etag: Option<String>) -> Option<String> {
        let next = match control.bundle(etag.as_deref()).await {
            Ok(BundlePull::NotModified) => {
                self.confirmed_now();
                etag
            }
            Ok(BundlePull::Fresh { etag: tag, body }) => {
                if self.install(&body) {
                    self.confirmed_now();
                    tracing::info!(version = ?self.bundle_version(), "bundle loaded");
                    tag
                } else {
                    None
                }
            }
            Err(e) => {
                // The last good bundle stays; without one, the fail-closed
                // table of the confirmed mode decides.
                tracing::warn!(error = %e, "bundle pull failed; keeping what we have");
                etag
            }
        };
        self.settled.store(true, Ordering::Release);
        next
    }

    /// Pulls every `interval` until `stop` resolves.
    pub async fn run_puller(
        self: Arc<Self>,
        control: ControlPlane,
        interval: Duration,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut etag = None;
        let mut stop = stop;
        loop {
            etag = self.pull(&control, etag).await;
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Follows the mode stream until `stop` resolves, reconnecting with
    /// backoff (0.5 s doubling to 30 s; reset after a good connection).
    pub async fn run_mode_stream(
        self: Arc<Self>,
        control: ControlPlane,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut stop = stop;
        let mut backoff = Duration::from_millis(500);
        loop {
            let connected = tokio::select! {
                r = self.follow(&control) => r,
                _ = stop.changed() => return,
            };
            if connected {
                backoff = Duration::from_millis(500);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// Reads one connection of the mode stream; whether it connected.
    async fn follow(&self, control: &ControlPlane) -> bool {
        let mut resp = match control.mode_stream().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "mode stream: cannot connect; retrying");
                return false;
            }
        };
        let mut events = crate::sse::EventReader::default();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    for (event, data) in events.feed(&chunk) {
                        if event == "mode_snapshot" || event == "mode_changed" {
                            self.apply_mode_event(&data);
                        }
                    }
                }
                Ok(None) => {
                    tracing::warn!("mode stream closed; reconnecting");
                    return true;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mode stream broke; reconnecting");
                    return true;
                }
            }
        }
    }

    fn apply_mode_event(&self, data: &str) {
        let mode = serde_json::from_str::<serde_json::Value>(data)
            .ok()
            .and_then(|v| v.get("agent_mode").cloned())
            .and_then(|m| serde_json::from_value::<AgentMode>(m).ok());
        match mode {
            Some(m) => {
                tracing::info!(mode = m.as_str(), "mode applied");
                self.set_mode(m);
            }
            None => tracing::warn!("mode stream: an event without a readable agent_mode"),
        }
    }
}
