//! Agents (spec 2.2, 3.2): creation with an `allow_` key, updates with human
//! pinning, shutdown, registration and auto-provisioning, and mode
//! resolution against the organization's default.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::ToSchema;
use warden_engine::model::{
    AgentAttributes, AgentMode, AgentNoCoverage, BusinessFunction, Facet, ModeByOperation,
    TrustTier, resolve_mode,
};

use crate::auth::{Audience, Environment, Scope};
use crate::error::ApiError;
use crate::extract::{DetailsShape, Issues};
use crate::keys::{self, Expiry, Issued, KeySpec};
use crate::store::{Agent, AgentDoc, ApiKey, OrgId, Store, StoreError};

/// The fields an operator sets (`POST` and `PUT /allow/agents`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentBody {
    /// `POST` only: the logical id agents present, 1-255 characters.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// 1-255 characters; setting it pins it against AI naming.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// `enforce`, `monitor`, `off`; `null` (or absent on create) inherits
    /// the organization's `default_agent_mode`.
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub mode: Option<Option<AgentMode>>,
    /// Per-operation overrides, e.g. `{"retrieval": "enforce"}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub mode_by_operation: Option<ModeByOperation>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub owner_email: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub hitl_pathway: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub trust_tier: Option<Option<String>>,
    #[serde(default)]
    pub categories: Option<Vec<String>>,
    /// `open`, `closed` or `null`.
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub no_coverage: Option<Option<AgentNoCoverage>>,
    /// Setting it pins it against AI classification; `null` clears it.
    #[serde(default, deserialize_with = "crate::extract::nullable")]
    #[schema(value_type = Option<String>)]
    pub business_function: Option<Option<BusinessFunction>>,
    /// `POST` only: a custom agent key (16-256 visible characters);
    /// generated when absent.
    #[serde(default)]
    pub api_key: Option<String>,
}

impl AgentBody {
    fn has_update(&self) -> bool {
        self.name.is_some()
            || self.description.is_some()
            || self.mode.is_some()
            || self.mode_by_operation.is_some()
            || self.owner_email.is_some()
            || self.hitl_pathway.is_some()
            || self.trust_tier.is_some()
            || self.categories.is_some()
            || self.no_coverage.is_some()
            || self.business_function.is_some()
    }

    /// Applies the body to `doc`/`mode`, collecting issues.
    fn apply(self, doc: &mut AgentDoc, mode: &mut Option<AgentMode>, issues: &mut Issues) {
        if let Some(name) = self.name {
            issues.length("name", &name, 1, 255);
            doc.name = name;
            doc.name_pinned = true;
        }
        if let Some(d) = self.description {
            issues.length_opt("description", d.as_deref(), 0, 1000);
            doc.description = d;
        }
        if let Some(m) = self.mode {
            *mode = m;
        }
        if let Some(m) = self.mode_by_operation {
            doc.mode_by_operation = m;
        }
        if let Some(e) = self.owner_email {
            if e.as_deref()
                .is_some_and(|e| !e.contains('@') || e.len() > 320)
            {
                issues.push("owner_email", "must be an email address");
            }
            doc.owner_email = e;
        }
        if let Some(p) = self.hitl_pathway {
            issues.length_opt("hitl_pathway", p.as_deref(), 1, 255);
            doc.hitl_pathway = p;
        }
        if let Some(t) = self.trust_tier {
            if t.as_deref()
                .is_some_and(|t| TrustTier::parse(t).is_none() || t.len() > 64)
            {
                issues.push(
                    "trust_tier",
                    "must be a tier such as tier1 (highest trust), tier2, tier3",
                );
            }
            doc.trust_tier = t;
        }
        if let Some(c) = self.categories {
            for (i, cat) in c.iter().enumerate() {
                issues.length(&format!("categories.{i}"), cat, 1, 100);
            }
            doc.categories = c;
        }
        if let Some(n) = self.no_coverage {
            doc.no_coverage = n;
        }
        if let Some(b) = self.business_function {
            doc.business_function = b;
            doc.business_function_pinned = true;
        }
    }
}

/// An agent's modes, resolved against the organization's default.
#[derive(Debug, Clone, PartialEq)]
pub struct Modes {
    /// The agent's own mode, or the default it inherits.
    pub mode: AgentMode,
    /// Each facet's mode (its override, else `mode`).
    pub by_facet: [AgentMode; 3],
}

/// Resolves `agent`'s modes (spec 2.2).
pub fn modes(agent: &Agent, org_default: AgentMode) -> Modes {
    let mode = agent.mode.unwrap_or(org_default);
    Modes {
        mode,
        by_facet: Facet::ALL
            .map(|f| resolve_mode(f, &agent.doc.mode_by_operation, agent.mode, org_default)),
    }
}

/// The attributes rules see as `input.agent` (spec 2.12).
pub fn attributes(agent: &Agent) -> AgentAttributes {
    AgentAttributes {
        trust_tier: agent.doc.trust_tier.clone(),
        categories: agent.doc.categories.clone(),
        // The single classification, as the list form rules may also read.
        business_functions: agent
            .doc
            .business_function
            .iter()
            .filter_map(|b| serde_json::to_value(b).ok()?.as_str().map(str::to_owned))
            .collect(),
        business_function: agent.doc.business_function,
        blast_radius_tier: None,
        no_coverage: agent.doc.no_coverage,
    }
}

/// Creates (or re-creates, after a shutdown) an agent and its `allow_` key.
pub async fn create(
    store: &dyn Store,
    org: OrgId,
    creator: &ApiKey,
    body: AgentBody,
    now: DateTime<Utc>,
) -> Result<(Agent, Issued), ApiError> {
    let mut issues = Issues::default();
    let agent_id = body.agent_id.clone().unwrap_or_default();
    issues.length("agent_id", &agent_id, 1, 255);
    if body.name.is_none() {
        issues.push("name", "required");
    }
    let custom = body.api_key.clone();
    if let Some(k) = &custom
        && !crate::auth::presentable(k)
    {
        issues.push(
            "api_key",
            "a custom key must be 16 to 256 visible ASCII characters",
        );
    }
    let (mut doc, mut mode) = (AgentDoc::default(), None);
    body.apply(&mut doc, &mut mode, &mut issues);
    issues.into_result(DetailsShape::RawIssues)?;

    let agent = match store.agent_by_agent_id(org, &agent_id).await? {
        Some(existing) if existing.deleted_at.is_none() => {
            return Err(ApiError::Conflict(format!("agent `{agent_id}` exists")));
        }
        // Created again after a shutdown: the same row comes back to life.
        Some(existing) => store
            .save_agent(org, existing.id, mode, &doc, None, now)
            .await?
            .ok_or(ApiError::NotFound)?,
        None => store
            .insert_agent(org, &agent_id, mode, &doc, now)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => ApiError::Conflict(format!("agent `{agent_id}` exists")),
                other => other.into(),
            })?,
    };
    let spec = KeySpec {
        name: format!("agent {agent_id}").chars().take(50).collect(),
        audience: Audience::Harness,
        environment: Environment::Production,
        permissions: Vec::new(),
        scopes: vec![Scope::FullAccess],
        // Agent keys do not lapse by themselves: an agent should not stop
        // being governed on a date nobody remembers. Rotate or revoke them.
        expiry: Expiry::Never,
        agent_id: Some(agent_id.clone()),
        plaintext: custom,
    };
    match keys::create(store, org, Some(creator), spec, now).await {
        Ok(issued) => Ok((agent, issued)),
        Err(e) => {
            // Nothing half-written: the agent goes with its key.
            let _ = store
                .save_agent(org, agent.id, agent.mode, &agent.doc, Some(now), now)
                .await;
            Err(match e {
                ApiError::Conflict(_) => {
                    ApiError::Conflict("that api_key is already in use".into())
                }
                other => other,
            })
        }
    }
}

/// Applies a `PUT` to agent `id`.
pub async fn update(
    store: &dyn Store,
    org: OrgId,
    id: uuid::Uuid,
    body: AgentBody,
    now: DateTime<Utc>,
) -> Result<Agent, ApiError> {
    let mut issues = Issues::default();
    if body.agent_id.is_some() {
        issues.push("agent_id", "cannot be changed");
    }
    if body.api_key.is_some() {
        issues.push("api_key", "keys are managed under /api/keys");
    }
    if !body.has_update() && issues.is_empty() {
        return Err(ApiError::NoFieldsToUpdate);
    }
    let agent = live(store, org, id).await?;
    let (mut doc, mut mode) = (agent.doc.clone(), agent.mode);
    body.apply(&mut doc, &mut mode, &mut issues);
    issues.into_result(DetailsShape::RawIssues)?;
    store
        .save_agent(org, id, mode, &doc, None, now)
        .await?
        .ok_or(ApiError::NotFound)
}

/// The live (not shut down) agent `id`, or 404.
pub async fn live(store: &dyn Store, org: OrgId, id: uuid::Uuid) -> Result<Agent, ApiError> {
    match store.agent(org, id).await? {
        Some(a) if a.deleted_at.is_none() => Ok(a),
        _ => Err(ApiError::NotFound),
    }
}

/// Provisions `agent_id` in monitor mode if unknown (spec 3.2), returning
/// the agent either way.
pub async fn provision(
    store: &dyn Store,
    org: OrgId,
    agent_id: &str,
    now: DateTime<Utc>,
) -> Result<Agent, ApiError> {
    let doc = AgentDoc {
        name: agent_id.to_owned(),
        ..AgentDoc::default()
    };
    Ok(store
        .provision_agent(org, agent_id, Some(AgentMode::Monitor), &doc, now)
        .await?)
}

/// `POST /allow/agents/register`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    pub agent_id: String,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    /// The server records the source address when absent.
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    /// `sdk` (default) or `cli_harness`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Registers an agent's environment, provisioning it if needed; idempotent.
pub async fn register(
    store: &dyn Store,
    org: OrgId,
    body: RegisterBody,
    source_ip: Option<String>,
    now: DateTime<Utc>,
) -> Result<Agent, ApiError> {
    let mut issues = Issues::default();
    issues.length("agent_id", &body.agent_id, 1, 255);
    for (field, value) in [
        ("os", &body.os),
        ("hostname", &body.hostname),
        ("ip", &body.ip),
        ("username", &body.username),
    ] {
        issues.length_opt(field, value.as_deref(), 1, 255);
    }
    let kind = body.kind.unwrap_or_else(|| "sdk".into());
    if kind != "sdk" && kind != "cli_harness" {
        issues.push("kind", "must be sdk or cli_harness");
    }
    issues.into_result(DetailsShape::RawIssues)?;
    let agent = provision(store, org, &body.agent_id, now).await?;
    let mut doc = agent.doc.clone();
    doc.agent_os = body.os.or(doc.agent_os);
    doc.agent_hostname = body.hostname.or(doc.agent_hostname);
    doc.agent_ip = body.ip.or(source_ip).or(doc.agent_ip);
    doc.agent_username = body.username.or(doc.agent_username);
    doc.kind = Some(kind);
    if doc == agent.doc {
        return Ok(agent);
    }
    // A shut-down agent stays shut down: registering is not creating.
    store
        .save_agent(org, agent.id, agent.mode, &doc, agent.deleted_at, now)
        .await?
        .ok_or(ApiError::NotFound)
}
