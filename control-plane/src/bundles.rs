//! Building the three bundles (spec 2.12) from the store, with the engine's
//! builders, so a bundle's version is the engine's canonical hash.

use chrono::{DateTime, Utc};
use warden_engine::bundle::{self, BundleSource};
use warden_engine::model::{
    ActionBundle, AgentAttributes, AgentMode, BundleRule, Facet, ModeByOperation,
    NoCoverageDefaults, NoCoverageSettings, RetrievalBundle, Rule, UnifiedBundle,
};

use crate::agents;
use crate::error::ApiError;
use crate::store::{Agent, OrgId, Settings, Store};

/// The organization's enabled rules, as bundles carry them.
async fn enabled_rules(store: &dyn Store, org: OrgId) -> Result<Vec<BundleRule>, ApiError> {
    Ok(store
        .all_rules(org)
        .await?
        .into_iter()
        .filter(|r| r.enabled)
        .map(bundle_rule)
        .collect())
}

fn bundle_rule(r: Rule) -> BundleRule {
    BundleRule {
        id: r.id,
        rule_code: r.rule_code,
        name: r.name,
        description: r.description,
        effect: r.effect,
        rego_source: r.rego_source.unwrap_or_default(),
        applies_to: r.applies_to,
        priority: r.priority,
        created_at: r.created_at,
        target_app: r.target_app,
        action_pattern: r.action_pattern,
        trust_tier: r.trust_tier,
        surface: r.surface,
        principal_exclusions: r.principal_exclusions,
        bypass: r.bypass,
    }
}

/// The agent a bundle is for: provisioned in monitor mode when unknown
/// (spec 3.2); `None` when it was shut down.
async fn agent_for_bundle(
    store: &dyn Store,
    org: OrgId,
    agent_id: &str,
    now: DateTime<Utc>,
) -> Result<Option<Agent>, ApiError> {
    let agent = match store.agent_by_agent_id(org, agent_id).await? {
        Some(a) => a,
        None => agents::provision(store, org, agent_id, now).await?,
    };
    Ok(agent.deleted_at.is_none().then_some(agent))
}

/// `GET /rules/bundle`: the unified bundle, or the terminal bundle for a
/// shut-down agent.
pub async fn unified(
    store: &dyn Store,
    org: OrgId,
    agent_id: &str,
    now: DateTime<Utc>,
) -> Result<UnifiedBundle, ApiError> {
    let Some(agent) = agent_for_bundle(store, org, agent_id, now).await? else {
        return Ok(bundle::terminal(agent_id));
    };
    let (settings, _) = store.ensure_settings(org, now).await?;
    build_unified(store, org, &settings, Some(&agent), agent_id).await
}

/// The unified bundle of `agent` (or, for an agent the organization does not
/// know, of an agent with no attributes in the default mode).
pub async fn build_unified(
    store: &dyn Store,
    org: OrgId,
    settings: &Settings,
    agent: Option<&Agent>,
    agent_id: &str,
) -> Result<UnifiedBundle, ApiError> {
    let rules = enabled_rules(store, org).await?;
    let default_mode = settings.doc.default_agent_mode;
    let (mode, by_operation, attributes) = match agent {
        Some(a) => (
            agents::modes(a, default_mode).mode,
            a.doc.mode_by_operation.clone(),
            agents::attributes(a),
        ),
        None => (
            default_mode,
            ModeByOperation::new(),
            AgentAttributes::default(),
        ),
    };
    Ok(bundle::unified(&BundleSource {
        agent_id,
        agent_mode: mode,
        mode_by_operation: &by_operation,
        attributes: &attributes,
        cognition_capture: false,
        rules: &rules,
        no_coverage: &settings.doc.no_coverage,
    }))
}

/// `GET /allow/rules/bundle`: the action bundle in the agent's action mode.
/// A shut-down agent gets its terminal form: enforce, no rules, all-deny.
pub async fn action(
    store: &dyn Store,
    org: OrgId,
    agent_id: &str,
    now: DateTime<Utc>,
) -> Result<ActionBundle, ApiError> {
    let (settings, _) = store.ensure_settings(org, now).await?;
    let Some(agent) = agent_for_bundle(store, org, agent_id, now).await? else {
        let closed = NoCoverageSettings {
            no_coverage_defaults: NoCoverageDefaults::ALL_DENY,
            autopilot_enabled: false,
            enduser_hitl_enabled: false,
            ..settings.doc.no_coverage
        };
        return Ok(bundle::action(&[], AgentMode::Enforce, &closed));
    };
    let rules = enabled_rules(store, org).await?;
    let mode =
        agents::modes(&agent, settings.doc.default_agent_mode).by_facet[Facet::Action as usize];
    Ok(bundle::action(&rules, mode, &settings.doc.no_coverage))
}

/// `GET /recall/rules/bundle`: the organization's retrieval rules.
pub async fn retrieval(store: &dyn Store, org: OrgId) -> Result<RetrievalBundle, ApiError> {
    Ok(bundle::retrieval(&enabled_rules(store, org).await?))
}
