//! The route table: every route, its handler and what it requires of its
//! caller, in one place. The router is built from it, the authorization
//! middleware reads each route's [`Access`] from it, and tests walk it.

use axum::Router;
use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, post, put};

use crate::api::{
    agents, audit, bundles, evaluate, hitl, keys, ops, rules, settings, stream, telemetry,
};
use crate::app::AppState;
use crate::auth::{self, Access, Permission as P, Scope as S};
use crate::extract::BodyLimit;
use crate::idempotency;

/// One route of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDef {
    pub method: &'static str,
    /// axum's (and OpenAPI's) template, `{id}` for parameters.
    pub path: &'static str,
    /// `None`: public (operational endpoints).
    pub access: Option<Access>,
    /// A body limit of its own (else the configured `max_body_bytes`).
    pub body_limit: Option<usize>,
    /// Honours `Idempotency-Key` (spec 8). Writes are, except the routes the
    /// spec excludes and those whose response holds a new secret (a stored
    /// replay would keep the key's plaintext at rest).
    pub idempotent: bool,
}

const KEY_ADMIN: &[P] = &[P::ApiKeysCreate, P::ApiKeysRotate, P::ApiKeysDelete];

/// `POST /allow/agents/register`: on the harness allowlist; management keys
/// need the agent-management permission and an evaluation scope (spec 4.2).
const OPERATIONAL_AGENTS: Access = Access {
    permissions: &[P::AllowAgentsCreate],
    scopes: &[S::RulesEvaluate, S::AllowWrite],
    harness: true,
};

/// Room for a full telemetry batch (100 × 32 KB of context, and the rest).
const TELEMETRY_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// Any authenticated key (harness keys too), no permission or scope.
const ANY_KEY: Access = Access {
    permissions: &[],
    scopes: &[],
    harness: true,
};

const fn management(permissions: &'static [P]) -> Access {
    scoped(permissions, &[])
}

const fn scoped(permissions: &'static [P], scopes: &'static [S]) -> Access {
    Access {
        permissions,
        scopes,
        harness: false,
    }
}

/// A route on the harness allowlist: harness keys pass; management keys
/// need `permissions` and `scopes`.
const fn harness_ok(permissions: &'static [P], scopes: &'static [S]) -> Access {
    Access {
        permissions,
        scopes,
        harness: true,
    }
}

// Spec §5.3: evaluation needs `rules:evaluate` or the legacy write scope of
// its facet.
const EVALUATE: &[S] = &[S::RulesEvaluate, S::AllowWrite, S::RecallWrite];
const EVALUATE_ALLOW: &[S] = &[S::RulesEvaluate, S::AllowWrite];
const EVALUATE_RECALL: &[S] = &[S::RulesEvaluate, S::RecallWrite];

// Spec §5.3: reads need `rules:read` or the surface's legacy read scope;
// mutations `rules:write` or the surface's legacy write scope.
const READ: &[S] = &[S::RulesRead];
const READ_ALLOW: &[S] = &[S::RulesRead, S::AllowRead];
const READ_RECALL: &[S] = &[S::RulesRead, S::RecallRead];
const WRITE: &[S] = &[S::RulesWrite];
const WRITE_ALLOW: &[S] = &[S::RulesWrite, S::AllowWrite];
const WRITE_RECALL: &[S] = &[S::RulesWrite, S::RecallWrite];

fn table() -> Vec<(RouteDef, MethodRouter<AppState>)> {
    let def = |method: &'static str, path, access: Option<Access>| RouteDef {
        method,
        path,
        access,
        idempotent: access.is_some() && method != "GET",
        body_limit: None,
    };
    // Responses that carry a new key's plaintext are never stored.
    let secret = |d: RouteDef| RouteDef {
        idempotent: false,
        ..d
    };
    // The routes spec 8 excludes from idempotency.
    let no_idem = secret;
    vec![
        (def("GET", "/healthz", None), get(ops::healthz)),
        (def("GET", "/readyz", None), get(ops::readyz)),
        (def("GET", "/metrics", None), get(ops::metrics)),
        (def("GET", "/openapi.json", None), get(ops::openapi)),
        (
            secret(def(
                "POST",
                "/api/keys",
                Some(management(&[P::ApiKeysCreate])),
            )),
            post(keys::create),
        ),
        (
            def("GET", "/api/keys", Some(management(KEY_ADMIN))),
            get(keys::list),
        ),
        (
            def("GET", "/api/keys/{id}", Some(management(KEY_ADMIN))),
            get(keys::get),
        ),
        (
            def(
                "DELETE",
                "/api/keys/{id}",
                Some(management(&[P::ApiKeysDelete])),
            ),
            delete(keys::delete),
        ),
        (
            secret(def(
                "POST",
                "/api/keys/{id}/rotate",
                Some(management(&[P::ApiKeysRotate])),
            )),
            post(keys::rotate),
        ),
        (
            def(
                "GET",
                "/allow/agents",
                Some(management(&[P::AllowAgentsView])),
            ),
            get(agents::list),
        ),
        (
            def(
                "POST",
                "/allow/agents",
                Some(management(&[P::AllowAgentsCreate])),
            ),
            post(agents::create),
        ),
        (
            def(
                "GET",
                "/allow/agents/{id}",
                Some(management(&[P::AllowAgentsView])),
            ),
            get(agents::get),
        ),
        (
            def(
                "PUT",
                "/allow/agents/{id}",
                Some(management(&[P::AllowAgentsUpdate])),
            ),
            put(agents::update),
        ),
        (
            def(
                "DELETE",
                "/allow/agents/{id}",
                Some(management(&[P::AllowAgentsDelete])),
            ),
            delete(agents::delete),
        ),
        (
            def(
                "POST",
                "/allow/agents/{id}/regenerate-naming",
                Some(management(&[P::AllowAgentsUpdate])),
            ),
            post(agents::regenerate_naming),
        ),
        (
            def("POST", "/allow/agents/register", Some(OPERATIONAL_AGENTS)),
            post(agents::register),
        ),
        (
            def(
                "GET",
                "/allow/settings",
                Some(management(&[P::AllowSettingsView])),
            ),
            get(settings::get),
        ),
        (
            def(
                "PUT",
                "/allow/settings",
                Some(management(&[P::AllowSettingsUpdate])),
            ),
            put(settings::put),
        ),
        // Evaluation: on the harness allowlist, never idempotent (spec 8).
        (
            no_idem(def("POST", "/evaluate", Some(harness_ok(&[], EVALUATE)))),
            post(evaluate::unified),
        ),
        (
            no_idem(def(
                "POST",
                "/allow/evaluate",
                Some(harness_ok(&[], EVALUATE_ALLOW)),
            )),
            post(evaluate::allow),
        ),
        (
            no_idem(def(
                "POST",
                "/recall/evaluate",
                Some(harness_ok(&[], EVALUATE_RECALL)),
            )),
            post(evaluate::recall),
        ),
        // What sidecars report; SDK ingest routes are never idempotent (spec 8).
        // A full batch is 100 items of up to 32 KB of context each.
        (
            RouteDef {
                body_limit: Some(TELEMETRY_BODY_LIMIT),
                ..no_idem(def(
                    "POST",
                    "/allow/telemetry",
                    Some(harness_ok(&[], EVALUATE_ALLOW)),
                ))
            },
            post(telemetry::telemetry),
        ),
        (
            no_idem(def(
                "POST",
                "/allow/execution-events",
                Some(harness_ok(&[], EVALUATE_ALLOW)),
            )),
            post(telemetry::execution),
        ),
        (
            def(
                "GET",
                "/allow/agents/me/stream",
                Some(harness_ok(&[P::AllowAgentsView], &[])),
            ),
            get(stream::stream),
        ),
        // Audit logs: management keys only (spec 4.2, 4.3).
        (
            def(
                "GET",
                "/v1/allow/audit-log",
                Some(scoped(&[P::AllowAuditLogView], READ_ALLOW)),
            ),
            get(audit::allow),
        ),
        (
            def(
                "GET",
                "/v1/recall/audit-log",
                Some(scoped(&[P::RecallAuditLogView], READ_RECALL)),
            ),
            get(audit::recall),
        ),
        // Approvals: the decision record the sidecar polls, and the queue.
        (
            def(
                "GET",
                "/v1/allow/decisions/{id}",
                Some(harness_ok(&[P::AllowAuditLogView], READ_ALLOW)),
            ),
            get(hitl::decision),
        ),
        (
            def(
                "GET",
                "/allow/hitl/queue",
                Some(management(&[P::AllowHitlView])),
            ),
            get(hitl::queue),
        ),
        (
            def(
                "POST",
                "/allow/hitl/queue",
                Some(management(&[P::AllowHitlRespond])),
            ),
            post(hitl::escalate),
        ),
        (
            def(
                "POST",
                "/allow/hitl/queue/{id}",
                Some(management(&[P::AllowHitlRespond])),
            ),
            post(hitl::respond),
        ),
        // Bundles: on the harness allowlist (spec 5.2).
        (
            def(
                "GET",
                "/rules/bundle",
                Some(harness_ok(&[P::AllowRulesView], READ)),
            ),
            get(bundles::unified),
        ),
        (
            def(
                "GET",
                "/allow/rules/bundle",
                Some(harness_ok(&[P::AllowRulesView], READ_ALLOW)),
            ),
            get(bundles::action),
        ),
        (
            def(
                "GET",
                "/recall/rules/bundle",
                Some(harness_ok(&[P::RecallRulesView], READ_RECALL)),
            ),
            get(bundles::retrieval),
        ),
        // The rules collection, through its three surfaces (spec 4.1-4.3).
        (
            def("GET", "/rules", Some(scoped(&[P::AllowRulesView], READ))),
            get(rules::unified::list),
        ),
        (
            def(
                "POST",
                "/rules",
                Some(scoped(&[P::AllowRulesCreate], WRITE)),
            ),
            post(rules::unified::create),
        ),
        (
            def(
                "GET",
                "/rules/{id}",
                Some(scoped(&[P::AllowRulesView], READ)),
            ),
            get(rules::unified::get),
        ),
        (
            def(
                "PUT",
                "/rules/{id}",
                Some(scoped(&[P::AllowRulesUpdate], WRITE)),
            ),
            put(rules::unified::update),
        ),
        (
            def(
                "DELETE",
                "/rules/{id}",
                Some(scoped(&[P::AllowRulesDelete], WRITE)),
            ),
            delete(rules::unified::delete),
        ),
        (
            def(
                "GET",
                "/allow/rules",
                Some(scoped(&[P::AllowRulesView], READ_ALLOW)),
            ),
            get(rules::action::list),
        ),
        (
            def(
                "POST",
                "/allow/rules",
                Some(scoped(&[P::AllowRulesCreate], WRITE_ALLOW)),
            ),
            post(rules::action::create),
        ),
        (
            def(
                "GET",
                "/allow/rules/{id}",
                Some(scoped(&[P::AllowRulesView], READ_ALLOW)),
            ),
            get(rules::action::get),
        ),
        (
            def(
                "PUT",
                "/allow/rules/{id}",
                Some(scoped(&[P::AllowRulesUpdate], WRITE_ALLOW)),
            ),
            put(rules::action::update),
        ),
        (
            def(
                "DELETE",
                "/allow/rules/{id}",
                Some(scoped(&[P::AllowRulesDelete], WRITE_ALLOW)),
            ),
            delete(rules::action::delete),
        ),
        (
            def(
                "GET",
                "/recall/rules",
                Some(scoped(&[P::RecallRulesView], READ_RECALL)),
            ),
            get(rules::retrieval::list),
        ),
        (
            def(
                "POST",
                "/recall/rules",
                Some(scoped(&[P::RecallRulesCreate], WRITE_RECALL)),
            ),
            post(rules::retrieval::create),
        ),
        (
            def(
                "GET",
                "/recall/rules/{id}",
                Some(scoped(&[P::RecallRulesView], READ_RECALL)),
            ),
            get(rules::retrieval::get),
        ),
        (
            def(
                "PUT",
                "/recall/rules/{id}",
                Some(scoped(&[P::RecallRulesUpdate], WRITE_RECALL)),
            ),
            put(rules::retrieval::update),
        ),
        (
            def(
                "DELETE",
                "/recall/rules/{id}",
                Some(scoped(&[P::RecallRulesDelete], WRITE_RECALL)),
            ),
            delete(rules::retrieval::delete),
        ),
        (
            def(
                "POST",
                "/recall/rules/{id}/bypass",
                Some(scoped(&[P::RecallRulesBypass], WRITE_RECALL)),
            ),
            post(rules::bypass_on),
        ),
        (
            def(
                "DELETE",
                "/recall/rules/{id}/bypass",
                Some(scoped(&[P::RecallRulesBypass], WRITE_RECALL)),
            ),
            delete(rules::bypass_off),
        ),
        (
            def("POST", "/allow/self/revoke", Some(ANY_KEY)),
            post(keys::self_revoke),
        ),
        (
            def("POST", "/api/allow/self/revoke", Some(ANY_KEY)),
            post(keys::self_revoke_api),
        ),
    ]
}

/// Every route (for tests and documentation).
pub fn route_table() -> Vec<RouteDef> {
    table().into_iter().map(|(d, _)| d).collect()
}

/// The router: each route with its authorization and body limit.
pub fn build(state: AppState) -> Router<AppState> {
    table()
        .into_iter()
        .fold(Router::new(), |router, (def, handler)| {
            let limit = def.body_limit.unwrap_or(state.config.max_body_bytes);
            debug_assert!(Method::from_bytes(def.method.as_bytes()).is_ok());
            // Innermost first: idempotency needs the caller `authorize` sets.
            let handler = if def.idempotent {
                handler.layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    idempotency::idempotent,
                ))
            } else {
                handler
            };
            let handler = match def.access {
                Some(access) => handler.layer(axum::middleware::from_fn_with_state(
                    (state.clone(), access),
                    auth::authorize,
                )),
                None => handler,
            };
            let handler: MethodRouter<AppState> = handler
                .layer::<_, std::convert::Infallible>(axum::extract::DefaultBodyLimit::max(limit))
                .layer::<_, std::convert::Infallible>(axum::Extension(BodyLimit(limit)));
            router.route(def.path, handler)
        })
}
