//! Authentication and authorization over HTTP: every 401 and 403 variant,
//! and a walk of the route table.

use chrono::{TimeDelta, Utc};
use reqwest::Method;
use serde_json::json;
use warden_control_plane::auth::{Permission, Scope};
use warden_control_plane::keys::{self, Grace};
use warden_control_plane::routes::route_table;

use super::support::{
    Backend, TestServer, assert_envelope, both_backends, harness, json, management,
};

async fn unauthenticated_variants(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;

    let (s, b) = json(
        srv.request(Method::GET, "/api/keys", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_envelope(s, &b, 401, "unauthenticated");
    assert_eq!(b["error"], "Unauthorized");

    let (s, b) = json(
        srv.request(Method::GET, "/api/keys", None)
            .header("authorization", "Basic abc")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_envelope(s, &b, 401, "unauthenticated");

    let (s, b) = json(srv.get("/api/keys", "not-a-key").await).await;
    assert_envelope(s, &b, 401, "unauthenticated");
    assert_eq!(b["error"], "Invalid API key or token");

    let unknown = format!("svc_prod_{}", "0".repeat(64));
    let (s, b) = json(srv.get("/api/keys", &unknown).await).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (401, Some("Invalid API key or token"))
    );

    // A revoked key.
    let (_, victim, _) = srv
        .key("acme", management("victim", &[], &[Scope::FullAccess]))
        .await;
    let (s, _) = json(srv.post("/allow/self/revoke", &victim, json!({})).await).await;
    assert_eq!(s, 200);
    let (s, b) = json(srv.get("/api/keys", &victim).await).await;
    assert_eq!(
        (s, b["error"].as_str()),
        (401, Some("Invalid API key or token"))
    );

    // An expired key: rotated with no grace.
    let (org, old, old_id) = srv
        .key(
            "acme",
            management("rotating", Permission::ALL, &[Scope::FullAccess]),
        )
        .await;
    let old_key = srv
        .store
        .key(org, warden_control_plane::store::KeyId(old_id))
        .await
        .unwrap()
        .unwrap();
    keys::rotate(
        srv.store.as_ref(),
        &old_key,
        None,
        Grace::Immediate,
        Utc::now(),
    )
    .await
    .unwrap();
    let (s, b) = json(srv.get("/api/keys", &old).await).await;
    assert_envelope(s, &b, 401, "unauthenticated");
    assert_eq!(b["error"], "API key has expired");

    // The admin key still works and carries the rate headers.
    let r = srv.get("/api/keys", &admin).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-limit"], "600");
    srv.stop().await;
}

/// Walks every authenticated route of the table with three keys: one that
/// lacks the route's permission, one that lacks its scope, and a harness key.
async fn route_table_walk(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let harness_key = srv.key("acme", harness("sidecar")).await.1;
    let no_permissions = srv
        .key("acme", management("bare", &[], &[Scope::FullAccess]))
        .await
        .1;
    let no_scopes = srv
        .key(
            "acme",
            management("scopeless", Permission::ALL, &[Scope::CognitionRead]),
        )
        .await
        .1;
    let mut walked = 0;
    for route in route_table() {
        let Some(access) = route.access else {
            let r = srv
                .request(
                    Method::from_bytes(route.method.as_bytes()).unwrap(),
                    route.path,
                    None,
                )
                .send()
                .await
                .unwrap();
            assert!(
                r.status().is_success(),
                "public route {} {} answers",
                route.method,
                route.path
            );
            continue;
        };
        walked += 1;
        let path = route
            .path
            .replace("{id}", &uuid::Uuid::new_v4().to_string());
        let method = Method::from_bytes(route.method.as_bytes()).unwrap();
        let send = |key: String| {
            let req = srv.request(method.clone(), &path, Some(&key));
            async move { json(req.json(&json!({})).send().await.unwrap()).await }
        };
        // No credential at all.
        let (s, b) = json(
            srv.request(method.clone(), &path, None)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_envelope(s, &b, 401, "unauthenticated");
        if let Some(first) = access.permissions.first() {
            let (s, b) = send(no_permissions.clone()).await;
            assert_envelope(s, &b, 403, "insufficient_permission");
            assert_eq!(
                b["requiredPermission"],
                first.as_str(),
                "{} {}",
                route.method,
                route.path
            );
            assert!(b["detail"].is_string());
        }
        if !access.scopes.is_empty() {
            let (s, b) = send(no_scopes.clone()).await;
            assert_envelope(s, &b, 403, "insufficient_scope");
            assert!(b["requiredScopes"].is_array() && b["grantedScopes"].is_array());
        }
        let (s, b) = send(harness_key.clone()).await;
        if access.harness {
            assert_ne!(
                s, 403,
                "harness keys reach {} {}: {b}",
                route.method, route.path
            );
        } else {
            assert_envelope(s, &b, 403, "harness_key_not_permitted");
        }
    }
    assert!(walked >= 7, "the table lists the authenticated routes");
    srv.stop().await;
}

async fn tenants_are_isolated(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let a = srv.admin("org-a").await;
    let (_, _, b_key_id) = srv
        .key("org-b", management("b", &[], &[Scope::FullAccess]))
        .await;
    for (method, path) in [
        (Method::GET, format!("/api/keys/{b_key_id}")),
        (Method::DELETE, format!("/api/keys/{b_key_id}")),
        (Method::POST, format!("/api/keys/{b_key_id}/rotate")),
    ] {
        let (s, b) = json(
            srv.request(method, &path, Some(&a))
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_envelope(s, &b, 404, "not_found");
    }
    let (_, list) = json(srv.get("/api/keys", &a).await).await;
    assert!(
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["id"] != b_key_id.to_string())
    );
    // Org B's key still works: A's attempts changed nothing.
    let stored = srv
        .store
        .key_any_org(warden_control_plane::store::KeyId(b_key_id))
        .await
        .unwrap()
        .unwrap();
    assert!(stored.revoked_at.is_none() && stored.replaced_by.is_none());
    srv.stop().await;
}

async fn last_use_is_recorded(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, key, id) = srv
        .key(
            "acme",
            management("user", &[Permission::ApiKeysCreate], &[Scope::FullAccess]),
        )
        .await;
    let before = Utc::now() - TimeDelta::seconds(1);
    assert_eq!(srv.get("/api/keys", &key).await.status(), 200);
    // The write happens off the request path: wait for it, boundedly.
    let mut seen = None;
    // Uses are written within half a second; allow three.
    for _ in 0..150 {
        seen = srv
            .store
            .key(org, warden_control_plane::store::KeyId(id))
            .await
            .unwrap()
            .unwrap()
            .last_used_at;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(seen.is_some_and(|t| t >= before), "{seen:?}");
    srv.stop().await;
}

both_backends!(
    unauthenticated_variants,
    route_table_walk,
    tenants_are_isolated,
    last_use_is_recorded
);
