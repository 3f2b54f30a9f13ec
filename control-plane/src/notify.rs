//! Announcing approval gates on the organization's notification channels
//! (spec 2.8, 2.9): a webhook gets a JSON `POST` of the queue item, off the
//! request path, retried with backoff; `notified_via` records the channels
//! that took it.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::store::{ChannelKind, HitlItem, Store};

/// Attempts per channel, and the wait before each retry.
const BACKOFF: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(500),
    Duration::from_secs(2),
];
/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Delivers announcements.
#[derive(Clone)]
pub struct Notifier {
    store: Arc<dyn Store>,
    http: reqwest::Client,
    /// Deliveries run here, on the server's runtime, whatever thread
    /// announces them (the decision sink has its own).
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier delivering on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(store: Arc<dyn Store>) -> Notifier {
        let http = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .user_agent(concat!("warden-control-plane/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Notifier {
            store,
            http,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Announces `item` on every channel of its organization, in the
    /// background. Returns at once.
    pub fn announce(&self, item: HitlItem) {
        let this = self.clone();
        self.runtime.spawn(async move { this.deliver(item).await });
    }

    async fn deliver(&self, item: HitlItem) {
        let settings = match self.store.ensure_settings(item.org, Utc::now()).await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "approval notification: settings unavailable");
                return;
            }
        };
        let payload = serde_json::json!({
            "type": "approval_required",
            "item": crate::api::hitl::HitlView::from(item.clone()),
        });
        let mut via = Vec::new();
        for channel in &settings.doc.notification_channels {
            match channel.kind {
                ChannelKind::Webhook => {
                    if self.post(&channel.url, &payload).await {
                        via.push("webhook".to_owned());
                    }
                }
            }
        }
        if !via.is_empty()
            && let Err(e) = self.store.set_notified(item.org, item.id, &via).await
        {
            tracing::warn!(error = %e, "approval notification: could not record notified_via");
        }
    }

    /// Posts with retries; `true` once a 2xx came back.
    async fn post(&self, url: &str, payload: &serde_json::Value) -> bool {
        for (attempt, wait) in BACKOFF.iter().enumerate() {
            tokio::time::sleep(*wait).await;
            match self.http.post(url).json(payload).send().await {
                Ok(r) if r.status().is_success() => return true,
                Ok(r) => tracing::warn!(
                    status = r.status().as_u16(),
                    attempt,
                    "approval webhook refused"
                ),
                // The URL may carry a token: log the error kind, never the URL.
                Err(e) => tracing::warn!(
                    attempt,
                    timeout = e.is_timeout(),
                    connect = e.is_connect(),
                    "approval webhook failed"
                ),
            }
        }
        false
    }
}
