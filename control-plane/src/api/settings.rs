//! `GET/PUT /allow/settings` (spec 2.9, 4.2).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_engine::model::{AgentMode, NoCoverageDefaults};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, DetailsShape, Issues};
use crate::store::{NotificationChannel, Settings};

/// The settings object.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingsView {
    pub id: uuid::Uuid,
    /// `read`, `write`, `delete`, `admin`: each `allow`, `deny` or `ask`.
    #[schema(value_type = Object)]
    pub no_coverage_defaults: NoCoverageDefaults,
    pub autopilot_enabled: bool,
    pub enduser_hitl_enabled: bool,
    /// 30-120 seconds.
    pub hitl_timeout_seconds: u32,
    pub notification_channels: Vec<NotificationChannel>,
    /// `enforce`, `monitor` (default) or `off`.
    #[schema(value_type = String)]
    pub default_agent_mode: AgentMode,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Settings> for SettingsView {
    fn from(s: Settings) -> SettingsView {
        SettingsView {
            id: s.id,
            no_coverage_defaults: s.doc.no_coverage.no_coverage_defaults,
            autopilot_enabled: s.doc.no_coverage.autopilot_enabled,
            enduser_hitl_enabled: s.doc.no_coverage.enduser_hitl_enabled,
            hitl_timeout_seconds: s.doc.no_coverage.hitl_timeout_seconds,
            notification_channels: s.doc.notification_channels,
            default_agent_mode: s.doc.default_agent_mode,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// `PUT /allow/settings`: any subset; `no_coverage_defaults` replaces the
/// whole object (all four keys).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsPatch {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub no_coverage_defaults: Option<NoCoverageDefaults>,
    #[serde(default)]
    pub autopilot_enabled: Option<bool>,
    #[serde(default)]
    pub enduser_hitl_enabled: Option<bool>,
    #[serde(default)]
    pub hitl_timeout_seconds: Option<i64>,
    #[serde(default)]
    pub notification_channels: Option<Vec<NotificationChannel>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub default_agent_mode: Option<AgentMode>,
}

#[utoipa::path(get, path = "/allow/settings", tag = "settings",
    responses((status = 200, body = SettingsView), (status = 201, body = SettingsView, description = "first access: the defaults were created")),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<(StatusCode, Json<SettingsView>), ApiError> {
    let (settings, created) = state
        .store
        .ensure_settings(caller.key.org, Utc::now())
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(settings.into())))
}

#[utoipa::path(put, path = "/allow/settings", tag = "settings", request_body = SettingsPatch,
    responses((status = 200, body = SettingsView), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(patch): ApiJson<SettingsPatch>,
) -> Result<Json<SettingsView>, ApiError> {
    let SettingsPatch {
        no_coverage_defaults,
        autopilot_enabled,
        enduser_hitl_enabled,
        hitl_timeout_seconds,
        notification_channels,
        default_agent_mode,
    } = patch;
    let mut issues = Issues::default();
    let timeout = match hitl_timeout_seconds {
        Some(t) if !(30..=120).contains(&t) => {
            issues.push("hitl_timeout_seconds", "must be 30 to 120");
            None
        }
        Some(t) => u32::try_from(t).ok(),
        None => None,
    };
    for (i, c) in notification_channels.iter().flatten().enumerate() {
        if !(c.url.starts_with("http://") || c.url.starts_with("https://")) || c.url.len() > 2048 {
            issues.push(
                &format!("notification_channels.{i}.url"),
                "must be an http:// or https:// URL of at most 2048 characters",
            );
        }
    }
    let empty = no_coverage_defaults.is_none()
        && autopilot_enabled.is_none()
        && enduser_hitl_enabled.is_none()
        && hitl_timeout_seconds.is_none()
        && notification_channels.is_none()
        && default_agent_mode.is_none();
    if empty {
        return Err(ApiError::NoFieldsToUpdate);
    }
    issues.into_result(DetailsShape::RawIssues)?;
    let now = Utc::now();
    let (current, _) = state.store.ensure_settings(caller.key.org, now).await?;
    let mut doc = current.doc;
    if let Some(v) = no_coverage_defaults {
        doc.no_coverage.no_coverage_defaults = v;
    }
    if let Some(v) = autopilot_enabled {
        doc.no_coverage.autopilot_enabled = v;
    }
    if let Some(v) = enduser_hitl_enabled {
        doc.no_coverage.enduser_hitl_enabled = v;
    }
    if let Some(v) = timeout {
        doc.no_coverage.hitl_timeout_seconds = v;
    }
    if let Some(v) = notification_channels {
        doc.notification_channels = v;
    }
    if let Some(v) = default_agent_mode {
        doc.default_agent_mode = v;
    }
    let saved = state.store.save_settings(caller.key.org, &doc, now).await?;
    if default_agent_mode.is_some() {
        // Every agent that inherits the default moves with it.
        state
            .announce_mode(crate::store::ModeEvent {
                org: caller.key.org,
                agent_id: None,
            })
            .await;
    }
    Ok(Json(saved.into()))
}
