//! The OpenAPI document, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{keys, ops};

#[derive(OpenApi)]
#[openapi(
    info(title = "Warden control plane", description = "The governance API: rules, agents, keys, approvals, audit."),
    paths(
        ops::healthz, ops::readyz, ops::metrics, ops::openapi,
        keys::create, keys::list, keys::get, keys::rotate, keys::delete,
        keys::self_revoke, keys::self_revoke_api,
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
