//! Server-side evaluation (spec 4.1-4.3): the agent's policy set, decided
//! by the engine (the same code the sidecar runs), persisted with payloads
//! masked at rest, and passed through the record seam.
//!
//! Policy sets are cached per (organization, agent) and rebuilt when the
//! fingerprint changes: the organization's rules revision (moved in the same
//! transaction as every rule write, so replicas sharing a database see it),
//! the settings' and the agent's `updated_at`. Compiled rules are shared
//! across sets by the engine's `RuleCache`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use uuid::Uuid;
use warden_engine::bundle::{self, RuleCache};
use warden_engine::model::{ActionInput, Decision, DelegationInput, RetrievalInput};
use warden_engine::redact::{RedactionSet, floor};
use warden_engine::{PolicySet, Verdict};

use crate::bundles;
use crate::error::ApiError;
use crate::sink::DecisionSink;
use crate::store::{ActionDecision, Agent, HitlItem, OrgId, RetrievalDecision, Store};

/// Policy sets are dropped wholesale past this many cached agents.
const MAX_CACHED_SETS: usize = 10_000;

/// What a cached policy set was built from.
#[derive(Debug, Clone, PartialEq)]
struct Fingerprint {
    revision: i64,
    settings_at: DateTime<Utc>,
    agent_at: Option<DateTime<Utc>>,
    shut_down: bool,
}

/// Compiled policy sets by organization and agent.
#[derive(Default)]
pub struct PolicyCache {
    rules: RuleCache,
    sets: Mutex<SetMap>,
}

type SetMap = HashMap<(OrgId, String), (Fingerprint, Arc<PolicySet>)>;

impl std::fmt::Debug for PolicyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCache").finish_non_exhaustive()
    }
}

/// Which agent a decision is for.
pub enum AgentRef<'a> {
    /// Known to the organization (shut down or not).
    Known(&'a Agent),
    /// Unknown and not provisioned (retrieval): no attributes, default mode.
    Unknown(&'a str),
}

impl AgentRef<'_> {
    fn agent_id(&self) -> &str {
        match self {
            AgentRef::Known(a) => &a.agent_id,
            AgentRef::Unknown(id) => id,
        }
    }
}

impl PolicyCache {
    /// The policy set `agent` decides with now.
    pub async fn policy(
        &self,
        store: &dyn Store,
        org: OrgId,
        agent: AgentRef<'_>,
        now: DateTime<Utc>,
    ) -> Result<Arc<PolicySet>, ApiError> {
        let (settings, _) = store.ensure_settings(org, now).await?;
        let known = match &agent {
            AgentRef::Known(a) => Some(*a),
            AgentRef::Unknown(_) => None,
        };
        let print = Fingerprint {
            revision: store.rules_revision(org).await?,
            settings_at: settings.updated_at,
            agent_at: known.map(|a| a.updated_at),
            shut_down: known.is_some_and(|a| a.deleted_at.is_some()),
        };
        let key = (org, agent.agent_id().to_owned());
        if let Some((p, set)) = self.lock().get(&key)
            && *p == print
        {
            return Ok(set.clone());
        }
        let unified = if print.shut_down {
            bundle::terminal(agent.agent_id())
        } else {
            bundles::build_unified(store, org, &settings, known, agent.agent_id()).await?
        };
        let set = Arc::new(
            bundle::load(&unified, &self.rules)
                .map_err(|e| ApiError::Internal(format!("stored rules do not load: {e}")))?,
        );
        let mut sets = self.lock();
        if sets.len() >= MAX_CACHED_SETS {
            sets.clear();
        }
        sets.insert(key, (print, set.clone()));
        Ok(set)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SetMap> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Masks a payload for storage: the rule's directives, then the floor.
/// Returns the masked value and the floor detectors that fired. A payload
/// that cannot be masked is not stored at all (replaced by a marker).
pub fn mask_at_rest(mut value: Value, directives: Option<&RedactionSet>) -> (Value, Vec<String>) {
    let unmaskable = || Value::String("[REDACTED: could not be masked]".into());
    if let Some(set) = directives
        && set.apply(&mut value).is_err()
    {
        return (unmaskable(), vec![]);
    }
    let mut report = floor::FloorReport::default();
    if floor::apply(&mut value, &mut report).is_err() {
        return (unmaskable(), vec![]);
    }
    (
        value,
        report.names().into_iter().map(str::to_owned).collect(),
    )
}

/// Masks a query string for storage (floor only; directives name fields).
pub fn mask_query(query: Option<&str>, detectors: &mut Vec<String>) -> Option<String> {
    let query = query?;
    let mut report = floor::FloorReport::default();
    let masked = floor::apply_str(query, &mut report).unwrap_or_else(|| query.to_owned());
    for d in report.names() {
        if !detectors.iter().any(|x| x == d) {
            detectors.push(d.to_owned());
        }
    }
    Some(masked)
}

/// A decided and stored action (or delegation).
pub struct Decided {
    pub id: Uuid,
    pub verdict: Verdict,
}

/// Decides an action for `agent`, stores it and records it.
pub async fn action(
    store: &dyn Store,
    cache: &PolicyCache,
    sink: &DecisionSink,
    org: OrgId,
    agent: AgentRef<'_>,
    input: ActionInput,
    now: DateTime<Utc>,
) -> Result<Decided, ApiError> {
    let set = cache.policy(store, org, agent, now).await?;
    let verdict = set.decide_action(&input);
    // The context moves on into the stored row (masked there), uncopied.
    let event = ActionEvent {
        agent_id: &input.agent_id,
        target_app: &input.target_app,
        action: &input.action,
        context: input.context,
    };
    let window = set.no_coverage().hitl_timeout_seconds;
    let id = store_action(sink, org, event, &verdict, window, now).await?;
    Ok(Decided { id, verdict })
}

/// Decides a delegation (`orchestrate.delegate` on the action facet).
pub async fn delegation(
    store: &dyn Store,
    cache: &PolicyCache,
    sink: &DecisionSink,
    org: OrgId,
    agent: AgentRef<'_>,
    input: &DelegationInput,
    now: DateTime<Utc>,
) -> Result<Decided, ApiError> {
    let set = cache.policy(store, org, agent, now).await?;
    let verdict = set.decide_delegation(input);
    let event = ActionEvent {
        agent_id: &input.agent_id,
        target_app: &input.target_app,
        action: warden_engine::model::DELEGATE_ACTION,
        context: serde_json::to_value(&input.context).unwrap_or(Value::Null),
    };
    let window = set.no_coverage().hitl_timeout_seconds;
    let id = store_action(sink, org, event, &verdict, window, now).await?;
    Ok(Decided { id, verdict })
}

/// What an action decision is about.
struct ActionEvent<'a> {
    agent_id: &'a str,
    target_app: &'a str,
    action: &'a str,
    context: Value,
}

/// The longest an approval gate stays open (spec §8).
const MAX_APPROVAL_WINDOW_SECS: u32 = 120;

/// Stores an action decision; an enforced `approval_required` opens its
/// queue item (an end-user gate) in the same transaction, open for the
/// organization's window clamped to 120 s.
async fn store_action(
    sink: &DecisionSink,
    org: OrgId,
    event: ActionEvent<'_>,
    verdict: &Verdict,
    window_secs: u32,
    now: DateTime<Utc>,
) -> Result<Uuid, ApiError> {
    let ActionEvent {
        agent_id,
        target_app,
        action,
        context,
    } = event;
    let (context, floor_detectors) = mask_at_rest(context, verdict.redactions.as_deref());
    let row = ActionDecision {
        // Time-ordered ids: a decision appends to the primary-key index
        // instead of writing a random page of it (decisions, gates and
        // telemetry rows are all v7).
        id: Uuid::now_v7(),
        org,
        agent_id: agent_id.to_owned(),
        target_app: target_app.to_owned(),
        action: action.to_owned(),
        context,
        decision: verdict.decision,
        would_decide: verdict.would_decide,
        reason: verdict.reason.clone(),
        reason_code: verdict.reason_code,
        rule_id: verdict.rule.as_ref().map(|r| r.id),
        rule_code: verdict.rule_code.clone(),
        enforced: verdict.enforced,
        agent_mode: verdict.agent_mode,
        floor_detectors,
        source: "server".into(),
        hitl_result: None,
        hitl_responded_at: None,
        hitl_responded_by: None,
        execution_result: None,
        execution_completed_at: None,
        execution_details: None,
        created_at: now,
    };
    if verdict.decision == Decision::ApprovalRequired {
        let window = TimeDelta::seconds(i64::from(window_secs.min(MAX_APPROVAL_WINDOW_SECS)));
        let item = HitlItem {
            id: Uuid::now_v7(),
            org,
            decision_id: Some(row.id),
            agent_id: row.agent_id.clone(),
            target_app: row.target_app.clone(),
            action: row.action.clone(),
            context: row.context.clone(),
            category: "enduser".into(),
            status: "pending".into(),
            ai_recommended_rule: None,
            notified_via: Vec::new(),
            resolution: None,
            dedupe_key: None,
            expires_at: Some(now + window),
            responded_at: None,
            responded_by: None,
            created_at: now,
        };
        let id = row.id;
        sink.action(row, Some(item)).await?;
        Ok(id)
    } else {
        let id = row.id;
        sink.action(row, None).await?;
        Ok(id)
    }
}

/// Decides a retrieval for `agent`, stores it masked and records it.
pub async fn retrieval(
    store: &dyn Store,
    cache: &PolicyCache,
    sink: &DecisionSink,
    org: OrgId,
    agent: AgentRef<'_>,
    input: &RetrievalInput,
    now: DateTime<Utc>,
) -> Result<Decided, ApiError> {
    let set = cache.policy(store, org, agent, now).await?;
    let verdict = set.decide_retrieval(input, now);
    let (resource_metadata, mut floor_detectors) = mask_at_rest(
        input.resource_metadata.clone(),
        verdict.redactions.as_deref(),
    );
    let query = mask_query(input.query.as_deref(), &mut floor_detectors);
    let row = RetrievalDecision {
        id: Uuid::now_v7(),
        org,
        agent_id: input.agent_id.clone(),
        operation: input.operation.as_str().to_owned(),
        resource_type: input.resource_type.clone(),
        resource_metadata,
        query,
        surface: input.surface.clone(),
        trust_tier: input.trust_tier.clone(),
        decision: verdict.decision,
        would_decide: verdict.would_decide,
        reason: verdict.reason.clone(),
        reason_code: verdict
            .reason_code
            .unwrap_or(warden_engine::model::ReasonCode::DefaultDeny),
        rule_id: verdict.rule.as_ref().map(|r| r.id),
        enforced: verdict.enforced,
        agent_mode: verdict.agent_mode,
        floor_detectors,
        created_at: now,
    };
    let id = row.id;
    sink.retrieval(row).await?;
    Ok(Decided { id, verdict })
}
