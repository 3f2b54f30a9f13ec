//! `GET /allow/agents/me/stream` (spec §6.1): Server-Sent Events with the
//! agent's mode: `mode_snapshot` on connect, `mode_changed` on every change
//! (the agent's own, or an organization default it inherits), `ping` every
//! 25 s.

use std::convert::Infallible;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, Sse};
use chrono::Utc;
use futures_util::Stream;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use warden_engine::model::AgentMode;

use crate::agents;
use crate::api::bundles::{BundleQuery, agent_id};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::store::{ModeEvent, OrgId};

/// The agent's mode now: its own or inherited; `enforce` once shut down
/// (its sidecar runs the terminal bundle).
async fn current(
    state: &AppState,
    org: OrgId,
    agent_id: &str,
) -> Result<Option<AgentMode>, ApiError> {
    let Some(agent) = state.store.agent_by_agent_id(org, agent_id).await? else {
        return Ok(None);
    };
    if agent.deleted_at.is_some() {
        return Ok(Some(AgentMode::Enforce));
    }
    let (settings, _) = state.store.ensure_settings(org, Utc::now()).await?;
    Ok(Some(
        agents::modes(&agent, settings.doc.default_agent_mode).mode,
    ))
}

fn event(name: &str, mode: AgentMode) -> Event {
    Event::default()
        .event(name)
        .data(json!({ "agent_mode": mode }).to_string())
}

/// Resolves once the server is stopping.
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            // The server's state is gone; it never stops from here.
            std::future::pending::<()>().await;
        }
    }
}

struct Subscription {
    state: AppState,
    org: OrgId,
    agent_id: String,
    rx: tokio::sync::broadcast::Receiver<ModeEvent>,
    ping: tokio::time::Interval,
    last: AgentMode,
    snapshot_sent: bool,
    /// The server is stopping: the stream ends.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Subscription {
    async fn next(&mut self) -> Option<Event> {
        if !self.snapshot_sent {
            self.snapshot_sent = true;
            return Some(event("mode_snapshot", self.last));
        }
        loop {
            tokio::select! {
                () = stopped(&mut self.stopping) => return None,
                _ = self.ping.tick() => return Some(Event::default().event("ping").data("{}")),
                received = self.rx.recv() => {
                    let relevant = match &received {
                        Ok(ev) => ev.org == self.org && ev.agent_id.as_ref().is_none_or(|a| *a == self.agent_id),
                        // Missed some: check the mode anyway.
                        Err(RecvError::Lagged(_)) => true,
                        Err(RecvError::Closed) => return None,
                    };
                    if !relevant {
                        continue;
                    }
                    match current(&self.state, self.org, &self.agent_id).await {
                        Ok(Some(mode)) if mode != self.last => {
                            self.last = mode;
                            return Some(event("mode_changed", mode));
                        }
                        Ok(_) => continue,
                        Err(e) => {
                            tracing::warn!(error = %e, "mode stream: could not read the mode");
                            continue;
                        }
                    }
                }
            }
        }
    }
}

#[utoipa::path(get, path = "/allow/agents/me/stream", tag = "agents",
    params(("agent_id" = String, Query)),
    responses((status = 200, description = "text/event-stream: mode_snapshot, mode_changed, ping; data {\"agent_mode\": …}"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<BundleQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let agent_id = agent_id(&caller, query)?;
    let org = caller.key.org;
    // Subscribe before reading the mode, so no change falls between the two.
    let rx = state.modes.subscribe();
    let last = current(&state, org, &agent_id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let period = state.config.stream_ping;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stopping = state.stopping.subscribe();
    let sub = Subscription {
        stopping,
        state,
        org,
        agent_id,
        rx,
        ping,
        last,
        snapshot_sent: false,
    };
    let events = futures_util::stream::unfold(sub, |mut sub| async move {
        let ev = sub.next().await?;
        Some((Ok::<_, Infallible>(ev), sub))
    });
    Ok(Sse::new(events))
}
