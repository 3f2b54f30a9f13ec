//! `POST /allow/evaluate`, `POST /recall/evaluate` and the unified
//! `POST /evaluate` (spec 4.1-4.3).

use axum::extract::State;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use warden_engine::model::{
    ActionInput, AgentMode, Decision, DelegationContext, DelegationInput, Facet, HitlFallback,
    RedactionDirective, RetrievalInput, RetrievalOperation,
};
use warden_engine::{UnifiedVerdict, Verdict};

use crate::agents;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::evaluate::{self, AgentRef, Decided};
use crate::extract::{ApiJson, DetailsShape, Issues};
use crate::rules::parse_operations;

/// `POST /allow/evaluate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionEvaluation {
    /// 1-255; unknown agents are provisioned in monitor mode.
    pub agent_id: Option<String>,
    /// 1-255.
    pub target_app: Option<String>,
    /// 1-255.
    pub action: Option<String>,
    /// The action's arguments (an object; default `{}`).
    pub context: Option<Value>,
    /// Opaque. Accepted; not stored yet: the audit-trail issue attaches it
    /// to the decision's record envelope.
    pub telemetry: Option<Value>,
}

/// The answer to `POST /allow/evaluate`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionDecisionView {
    pub decision_id: uuid::Uuid,
    #[schema(value_type = String)]
    pub decision: Decision,
    pub reason: String,
    /// `R-####`, or a synthetic no-coverage code such as `D-WRITE-ALLOW`.
    pub rule_code: Option<String>,
    pub enforced: bool,
    #[schema(value_type = String)]
    pub agent_mode: AgentMode,
    pub plane: Option<String>,
    /// The action's class (`read`, `write`, `delete`, `admin`).
    pub operation: Option<String>,
    pub is_retrieval: bool,
    /// On `mask`: the directives to apply to the arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub arg_redaction_rules: Option<Vec<RedactionDirective>>,
    /// On `approval_required` raised by a rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub hitl_fallback: Option<HitlFallback>,
    /// Monitor mode: the real outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub would_decide: Option<Decision>,
}

/// `POST /recall/evaluate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrievalEvaluation {
    pub agent_id: Option<String>,
    /// `retrieve`, `tool_call` or `prompt_render`.
    pub operation: Option<String>,
    /// Default `document`.
    pub resource_type: Option<String>,
    pub resource_metadata: Option<Value>,
    /// At most 50; the agent's assigned tier overrides it.
    pub trust_tier: Option<String>,
    /// At most 100.
    pub surface: Option<String>,
    /// At most 2000.
    pub query: Option<String>,
    /// Opaque. Accepted; not stored yet (see `ActionEvaluation::telemetry`).
    pub telemetry: Option<Value>,
}

/// The answer to `POST /recall/evaluate`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetrievalDecisionView {
    pub decision_id: uuid::Uuid,
    #[schema(value_type = String)]
    pub decision: Decision,
    pub reason_code: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub redaction_rules: Option<Vec<RedactionDirective>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub hitl_fallback: Option<HitlFallback>,
}

/// `POST /evaluate` (or its legacy form with `kind`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnifiedEvaluation {
    /// 1-3 of `action`, `retrieval`, `delegation`.
    pub operations: Option<Vec<String>>,
    /// Legacy: `action` or `retrieval`, instead of `operations`.
    pub kind: Option<String>,
    pub agent_id: Option<String>,
    pub target_app: Option<String>,
    pub action: Option<String>,
    pub context: Option<Value>,
    pub operation: Option<String>,
    pub resource_type: Option<String>,
    pub resource_metadata: Option<Value>,
    pub trust_tier: Option<String>,
    pub surface: Option<String>,
    pub query: Option<String>,
    /// Opaque. Accepted; not stored yet (see `ActionEvaluation::telemetry`).
    pub telemetry: Option<Value>,
}

/// One facet's result of `POST /evaluate`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FacetResult {
    pub operation: String,
    /// In the union vocabulary.
    #[schema(value_type = String)]
    pub decision: Decision,
    /// The facet's own word (`allow` for retrieval).
    #[schema(value_type = String)]
    pub plane_decision: Decision,
    pub decision_id: Option<uuid::Uuid>,
    pub reason: String,
    pub reason_code: Option<String>,
    pub rule_code: Option<String>,
    pub enforced: bool,
    #[schema(value_type = String)]
    pub agent_mode: AgentMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub redaction_rules: Option<Vec<RedactionDirective>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub hitl_fallback: Option<HitlFallback>,
}

/// The answer to `POST /evaluate`: the deciding facet's fields, and
/// `results` when several facets ran.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnifiedDecisionView {
    pub operations: Vec<String>,
    #[serde(flatten)]
    pub top: FacetResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<FacetResult>>,
}

fn required(value: Option<String>, field: &str, max: usize, issues: &mut Issues) -> String {
    match value {
        Some(v) => {
            issues.length(field, &v, 1, max);
            v
        }
        None => {
            issues.push(field, "required");
            String::new()
        }
    }
}

fn directives(v: &Verdict) -> Option<Vec<RedactionDirective>> {
    v.redactions.as_ref().map(|r| r.directives().to_vec())
}

fn action_view(d: &Decided) -> ActionDecisionView {
    let v = &d.verdict;
    let mask = v.decision == Decision::Mask || v.would_decide == Some(Decision::Mask);
    let approval = v.outcome() == Decision::ApprovalRequired;
    ActionDecisionView {
        decision_id: d.id,
        decision: v.decision,
        reason: v.reason.clone(),
        rule_code: v.rule_code.clone(),
        enforced: v.enforced,
        agent_mode: v.agent_mode,
        plane: Some("action".into()),
        operation: None,
        is_retrieval: false,
        arg_redaction_rules: if mask { directives(v) } else { None },
        hitl_fallback: if approval && v.rule.is_some() {
            v.hitl_fallback
        } else {
            None
        },
        would_decide: v.would_decide,
    }
}

fn retrieval_view(d: &Decided) -> RetrievalDecisionView {
    let v = &d.verdict;
    let shows_directives = matches!(v.outcome(), Decision::Redact)
        || (v.outcome() == Decision::Escalate && v.hitl_fallback == Some(HitlFallback::Mask));
    RetrievalDecisionView {
        decision_id: d.id,
        decision: v.decision,
        reason_code: v
            .reason_code
            .map_or("DEFAULT_DENY", |c| c.as_str())
            .to_owned(),
        reason: v.reason.clone(),
        redaction_rules: if shows_directives {
            directives(v)
        } else {
            None
        },
        hitl_fallback: (v.outcome() == Decision::Escalate)
            .then(|| v.hitl_fallback.unwrap_or_default()),
    }
}

#[utoipa::path(post, path = "/allow/evaluate", tag = "evaluation", request_body = ActionEvaluation,
    responses((status = 200, body = ActionDecisionView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn allow(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ActionEvaluation>,
) -> Result<ApiJson<ActionDecisionView>, ApiError> {
    let mut issues = Issues::default();
    let input = ActionInput {
        agent_id: required(body.agent_id, "agent_id", 255, &mut issues),
        target_app: required(body.target_app, "target_app", 255, &mut issues),
        action: required(body.action, "action", 255, &mut issues),
        context: issues.object("context", body.context),
    };
    issues.into_result(DetailsShape::RawIssues)?;
    caller.require_acts_for(&input.agent_id)?;
    let now = Utc::now();
    let store = state.store.as_ref();
    let agent = agents::provision(store, caller.key.org, &input.agent_id, now).await?;
    let operation = warden_engine::classify::classify(&input.action).as_str();
    let decided = evaluate::action(
        store,
        &state.policies,
        &state.sink,
        caller.key.org,
        AgentRef::Known(&agent),
        input,
        now,
    )
    .await?;
    let mut view = action_view(&decided);
    view.operation = Some(operation.to_owned());
    Ok(ApiJson(view))
}

/// `(trust_tier, surface, query)` length limits of a surface (spec §8).
type Limits = (usize, usize, usize);

fn retrieval_input(
    body: RetrievalEvaluation,
    limits: Limits,
    operation_required: bool,
    issues: &mut Issues,
) -> RetrievalInput {
    let RetrievalEvaluation {
        agent_id,
        operation,
        resource_type,
        resource_metadata,
        trust_tier,
        surface,
        query,
        telemetry: _,
    } = body;
    let (tier_max, surface_max, query_max) = limits;
    let agent_id = required(agent_id, "agent_id", 255, issues);
    let operation = match operation {
        Some(op) => serde_json::from_value::<RetrievalOperation>(Value::String(op.clone()))
            .unwrap_or_else(|_| {
                issues.push("operation", "must be retrieve, tool_call or prompt_render");
                RetrievalOperation::Retrieve
            }),
        None if operation_required => {
            issues.push("operation", "required");
            RetrievalOperation::Retrieve
        }
        None => RetrievalOperation::Retrieve,
    };
    let resource_type = resource_type.unwrap_or_else(|| "document".into());
    issues.length("resource_type", &resource_type, 1, 255);
    issues.length_opt("trust_tier", trust_tier.as_deref(), 0, tier_max);
    issues.length_opt("surface", surface.as_deref(), 0, surface_max);
    issues.length_opt("query", query.as_deref(), 0, query_max);
    RetrievalInput {
        agent_id,
        operation,
        resource_type,
        resource_metadata: issues.object("resource_metadata", resource_metadata),
        query,
        surface,
        trust_tier,
    }
}

#[utoipa::path(post, path = "/recall/evaluate", tag = "evaluation", request_body = RetrievalEvaluation,
    responses((status = 200, body = RetrievalDecisionView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RetrievalEvaluation>,
) -> Result<ApiJson<RetrievalDecisionView>, ApiError> {
    let mut issues = Issues::default();
    let input = retrieval_input(body, (50, 100, 2000), true, &mut issues);
    issues.into_result(DetailsShape::RawIssues)?;
    caller.require_acts_for(&input.agent_id)?;
    let now = Utc::now();
    let store = state.store.as_ref();
    // Unknown agents are not provisioned by retrieval (spec 3.2).
    let agent = store
        .agent_by_agent_id(caller.key.org, &input.agent_id)
        .await?;
    let agent_ref = agent
        .as_ref()
        .map_or(AgentRef::Unknown(&input.agent_id), AgentRef::Known);
    let decided = evaluate::retrieval(
        store,
        &state.policies,
        &state.sink,
        caller.key.org,
        agent_ref,
        &input,
        now,
    )
    .await?;
    Ok(ApiJson(retrieval_view(&decided)))
}

fn facet_result(facet: Facet, d: &Decided) -> FacetResult {
    let v = &d.verdict;
    let (redaction_rules, hitl_fallback) = match facet {
        Facet::Retrieval => {
            let view = retrieval_view(d);
            (view.redaction_rules, view.hitl_fallback)
        }
        _ => {
            let view = action_view(d);
            (view.arg_redaction_rules, view.hitl_fallback)
        }
    };
    FacetResult {
        operation: facet.as_str().to_owned(),
        decision: v.decision.to_union(),
        plane_decision: v.decision,
        decision_id: Some(d.id),
        reason: v.reason.clone(),
        reason_code: v.reason_code.map(|c| c.as_str().to_owned()),
        rule_code: v.rule_code.clone(),
        enforced: v.enforced,
        agent_mode: v.agent_mode,
        redaction_rules,
        hitl_fallback,
    }
}

#[utoipa::path(post, path = "/evaluate", tag = "evaluation", request_body = UnifiedEvaluation,
    responses((status = 200, body = UnifiedDecisionView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn unified(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<UnifiedEvaluation>,
) -> Result<ApiJson<UnifiedDecisionView>, ApiError> {
    let shape = DetailsShape::Flattened;
    let mut issues = Issues::default();
    let facets = match (&body.operations, &body.kind) {
        (Some(ops), None) => parse_operations(ops, "operations", &mut issues),
        (None, Some(kind)) => match kind.as_str() {
            "action" => vec![Facet::Action],
            "retrieval" => vec![Facet::Retrieval],
            _ => {
                issues.push("kind", "must be action or retrieval");
                vec![]
            }
        },
        (Some(_), Some(_)) => {
            issues.push("", "give operations or the legacy kind, not both");
            vec![]
        }
        (None, None) => {
            issues.push("operations", "required");
            vec![]
        }
    };
    let acting = facets
        .iter()
        .any(|f| matches!(f, Facet::Action | Facet::Delegation));
    let agent_id = required(body.agent_id.clone(), "agent_id", 255, &mut issues);
    let (target_app, action) = if acting {
        (
            required(body.target_app, "target_app", 255, &mut issues),
            required(body.action, "action", 255, &mut issues),
        )
    } else {
        (
            body.target_app.unwrap_or_default(),
            body.action.unwrap_or_default(),
        )
    };
    let context = issues.object("context", body.context);
    let retrieval = facets.contains(&Facet::Retrieval).then(|| {
        if body.resource_type.is_none() {
            issues.push(
                "resource_type",
                "required when operations include retrieval",
            );
        }
        let fields = RetrievalEvaluation {
            agent_id: body.agent_id.clone(),
            operation: body.operation.clone(),
            resource_type: body.resource_type.clone(),
            resource_metadata: body.resource_metadata.clone(),
            trust_tier: body.trust_tier.clone(),
            surface: body.surface.clone(),
            query: body.query.clone(),
            telemetry: None,
        };
        retrieval_input(fields, (64, 128, 4000), false, &mut issues)
    });
    issues.into_result(shape)?;
    caller.require_acts_for(&agent_id)?;

    let now = Utc::now();
    let store = state.store.as_ref();
    let (org, sink) = (caller.key.org, state.sink.as_ref());
    let agent = store.agent_by_agent_id(org, &agent_id).await?;
    let agent_ref = || {
        agent
            .as_ref()
            .map_or(AgentRef::Unknown(&agent_id), AgentRef::Known)
    };
    let mut decided: Vec<(Facet, Decided)> = Vec::new();
    for facet in &facets {
        let d = match facet {
            Facet::Action => {
                let input = ActionInput {
                    agent_id: agent_id.clone(),
                    target_app: target_app.clone(),
                    action: action.clone(),
                    context: context.clone(),
                };
                evaluate::action(store, &state.policies, sink, org, agent_ref(), input, now).await?
            }
            Facet::Delegation => {
                let mut ctx: DelegationContext =
                    serde_json::from_value(context.clone()).unwrap_or_default();
                if ctx.parent_agent_id.is_empty() {
                    ctx.parent_agent_id = agent_id.clone();
                }
                let input = DelegationInput {
                    agent_id: agent_id.clone(),
                    target_app: target_app.clone(),
                    context: ctx,
                };
                evaluate::delegation(store, &state.policies, sink, org, agent_ref(), &input, now)
                    .await?
            }
            Facet::Retrieval => {
                let input = retrieval
                    .as_ref()
                    .ok_or_else(|| ApiError::Internal("retrieval input missing".into()))?;
                evaluate::retrieval(store, &state.policies, sink, org, agent_ref(), input, now)
                    .await?
            }
        };
        decided.push((*facet, d));
    }
    let combined =
        UnifiedVerdict::combine(decided.iter().map(|(_, d)| d.verdict.clone()).collect());
    let results: Vec<FacetResult> = decided.iter().map(|(f, d)| facet_result(*f, d)).collect();
    // The deciding facet's fields, with the union's word.
    let mut top = results
        .get(combined.deciding)
        .cloned()
        .ok_or_else(|| ApiError::Internal("no facet ran".into()))?;
    top.decision = combined.decision;
    Ok(ApiJson(UnifiedDecisionView {
        operations: facets.iter().map(|f| f.as_str().to_owned()).collect(),
        top,
        results: (results.len() > 1).then_some(results),
    }))
}
