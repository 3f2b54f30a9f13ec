//! The OpenAPI document, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{
    agents, audit, bundles, evaluate, hitl, keys, ops, rules, settings, stream, telemetry,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "Warden control plane", description = "The governance API: rules, agents, keys, approvals, audit."),
    paths(
        ops::healthz, ops::readyz, ops::metrics, ops::openapi,
        keys::create, keys::list, keys::get, keys::rotate, keys::delete,
        keys::self_revoke, keys::self_revoke_api,
        rules::unified::list, rules::unified::create, rules::unified::get, rules::unified::update, rules::unified::delete,
        rules::action::list, rules::action::create, rules::action::get, rules::action::update, rules::action::delete,
        rules::retrieval::list, rules::retrieval::create, rules::retrieval::get, rules::retrieval::update, rules::retrieval::delete,
        rules::bypass_on, rules::bypass_off,
        settings::get, settings::put,
        bundles::unified, bundles::action, bundles::retrieval,
        evaluate::unified, evaluate::allow, evaluate::recall,
        hitl::decision, hitl::queue, hitl::respond, hitl::escalate,
        telemetry::telemetry, telemetry::execution,
        audit::allow, audit::recall,
        stream::stream,
        agents::list, agents::create, agents::get, agents::update, agents::delete, agents::regenerate_naming, agents::register,
    ),
    modifiers(&BearerAuth),
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("API key")
                    .build(),
            ),
        );
    }
}

/// The document served at `/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
