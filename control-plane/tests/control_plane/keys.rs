//! The key lifecycle over HTTP (spec 2.1, 3.1, 4.6, 5.4).

use reqwest::Method;
use serde_json::{Value, json};
use warden_control_plane::auth::{Permission, Scope};
use warden_control_plane::store::OrgId;

use super::support::{
    Backend, TestServer, assert_envelope, both_backends, harness, json, management,
};

async fn audit_actions(srv: &TestServer, org: OrgId) -> Vec<String> {
    srv.store
        .audit_entries(org)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect()
}

async fn create_list_get(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, _) = srv
        .key(
            "acme",
            management("admin", Permission::ALL, &[Scope::FullAccess]),
        )
        .await;

    let (s, created) = json(
        srv.post("/api/keys", &admin, json!({"name": "ci", "audience": "management", "permissions": ["allow_rules:view"], "environment": "test", "expires": "30d"}))
            .await,
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let plaintext = created["api_key"].as_str().unwrap();
    assert!(plaintext.starts_with("svc_test_") && plaintext.len() == 9 + 64);
    let display = created["display"].as_str().unwrap();
    assert_eq!(&display[..16], &plaintext[..16]);
    assert!(display[16..].chars().all(|c| c == '*'));
    assert_eq!(created["permissions"], json!(["allow_rules:view"]));

    // Reads never show the secret.
    let id = created["id"].as_str().unwrap();
    let (s, one) = json(srv.get(&format!("/api/keys/{id}"), &admin).await).await;
    assert_eq!(s, 200);
    assert!(one.get("api_key").is_none());
    assert!(!one.to_string().contains(&plaintext[16..]));
    let (_, list) = json(srv.get("/api/keys?limit=1&page=1", &admin).await).await;
    assert_eq!(
        (
            list["total"].as_u64(),
            list["limit"].as_u64(),
            list["data"].as_array().map(Vec::len)
        ),
        (Some(2), Some(1), Some(1))
    );

    // The new key authenticates, with exactly its permission.
    let (s, b) = json(srv.get("/api/keys", plaintext).await).await;
    assert_envelope(s, &b, 403, "insufficient_permission");

    // Validation: nothing stored, details say where.
    let (s, b) = json(
        srv.post(
            "/api/keys",
            &admin,
            json!({"name": "", "audience": "management"}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid request body");
    assert_eq!(b["details"][0]["path"], json!(["name"]));
    let (s, b) = json(
        srv.post(
            "/api/keys",
            &admin,
            json!({"name": "x", "audience": "robot"}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (s, b) = json(
        srv.post(
            "/api/keys",
            &admin,
            json!({"name": "x", "audience": "harness", "permissions": ["allow_rules:view"]}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(
        srv.store
            .list_keys(
                org,
                warden_control_plane::store::Page { page: 1, limit: 50 }
            )
            .await
            .unwrap()
            .1,
        2
    );

    assert_eq!(
        audit_actions(&srv, org).await,
        ["API_KEY_CREATED", "API_KEY_CREATED"]
    );
    srv.stop().await;
}

async fn creation_never_exceeds_the_creator(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (_, creator, _) = srv
        .key(
            "acme",
            management(
                "limited",
                &[Permission::ApiKeysCreate, Permission::AllowRulesView],
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (s, b) = json(
        srv.post("/api/keys", &creator, json!({"name": "x", "audience": "management", "permissions": ["allow_rules:view", "allow_rules:delete", "payloads:unmask"]}))
            .await,
    )
    .await;
    assert_eq!(s, 403, "{b}");
    assert_eq!(
        b["exceededPermissions"],
        json!(["allow_rules:delete", "payloads:unmask"])
    );
    let (s, _) = json(
        srv.post(
            "/api/keys",
            &creator,
            json!({"name": "x", "audience": "management", "permissions": ["allow_rules:view"]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    // Nor scopes beyond the creator's.
    let (_, narrow, _) = srv
        .key(
            "acme",
            management("narrow", &[Permission::ApiKeysCreate], &[Scope::RulesRead]),
        )
        .await;
    let (s, b) = json(
        srv.post(
            "/api/keys",
            &narrow,
            json!({"name": "y", "audience": "harness", "scopes": ["full_access"]}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 403, "insufficient_scope");
    assert_eq!(b["grantedScopes"], json!(["rules:read"]));
    srv.stop().await;
}

async fn rotation_and_grace(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, _) = srv
        .key(
            "acme",
            management("admin", Permission::ALL, &[Scope::FullAccess]),
        )
        .await;
    let (_, old, old_id) = srv
        .key(
            "acme",
            management("svc", &[Permission::ApiKeysCreate], &[Scope::FullAccess]),
        )
        .await;

    let (s, rotated) = json(
        srv.post(
            &format!("/api/keys/{old_id}/rotate"),
            &admin,
            json!({"grace": "1h"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201, "{rotated}");
    let new = rotated["api_key"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(rotated["name"], "svc");
    assert_eq!(rotated["permissions"], json!(["api_keys:create"]));
    // Both work during the grace window; the old one is retiring.
    assert_eq!(srv.get("/api/keys", &old).await.status(), 200);
    assert_eq!(srv.get("/api/keys", &new).await.status(), 200);
    let (_, old_view) = json(srv.get(&format!("/api/keys/{old_id}"), &admin).await).await;
    assert_eq!(old_view["status"], "retiring");
    assert_eq!(old_view["replaced_by_key_id"], rotated["id"]);
    // The replacement inherits the expiry (grace never extends life).
    let (_, new_view) = json(
        srv.get(
            &format!("/api/keys/{}", rotated["id"].as_str().unwrap()),
            &admin,
        )
        .await,
    )
    .await;
    assert!(old_view["expires_at"].as_str() <= new_view["expires_at"].as_str());

    // A key already rotated cannot be rotated again.
    let (s, b) = json(
        srv.post(&format!("/api/keys/{old_id}/rotate"), &admin, json!({}))
            .await,
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");

    // Immediate: the old key is expired at once.
    let new_id = rotated["id"].as_str().unwrap();
    let (s, r2) = json(
        srv.post(
            &format!("/api/keys/{new_id}/rotate"),
            &admin,
            json!({"grace": "immediate"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    let (s, b) = json(srv.get("/api/keys", &new).await).await;
    assert_eq!((s, b["error"].as_str()), (401, Some("API key has expired")));
    assert_eq!(
        srv.get("/api/keys", r2["api_key"].as_str().unwrap())
            .await
            .status(),
        200
    );

    // Rotating needs every permission of the key.
    let (_, rotator, _) = srv
        .key(
            "acme",
            management(
                "rotator",
                &[Permission::ApiKeysRotate],
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (s, b) = json(
        srv.post(
            &format!("/api/keys/{}/rotate", r2["id"].as_str().unwrap()),
            &rotator,
            json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["exceededPermissions"], json!(["api_keys:create"]));
    let (s, b) = json(
        srv.post(
            &format!("/api/keys/{}/rotate", r2["id"].as_str().unwrap()),
            &admin,
            json!({"grace": "2d"}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");

    let actions = audit_actions(&srv, org).await;
    assert_eq!(
        actions.iter().filter(|a| *a == "API_KEY_ROTATED").count(),
        2
    );
    srv.stop().await;
}

async fn revocation_rules(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, _) = srv
        .key(
            "acme",
            management("admin", Permission::ALL, &[Scope::FullAccess]),
        )
        .await;
    let (_, deleter, deleter_id) = srv
        .key(
            "acme",
            management(
                "deleter",
                &[Permission::ApiKeysDelete, Permission::ApiKeysCreate],
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (_, _, powerful_id) = srv
        .key(
            "acme",
            management(
                "powerful",
                &[Permission::PayloadsUnmask, Permission::ApiKeysDelete],
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (_, _, harness_id) = srv.key("acme", harness("sidecar")).await;

    // A more powerful management key: refused, with what it exceeds.
    let del = |id: String, key: String| {
        let req = srv.request(Method::DELETE, &format!("/api/keys/{id}"), Some(&key));
        async move { json(req.send().await.unwrap()).await }
    };
    let (s, b) = del(powerful_id.to_string(), deleter.clone()).await;
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["error"], "Cannot revoke a key more powerful than you");
    assert_eq!(b["exceededPermissions"], json!(["payloads:unmask"]));

    // Harness keys: any holder of api_keys:delete.
    let (s, b) = del(harness_id.to_string(), deleter.clone()).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (b["revoked"].as_bool(), b["key_type"].as_str()),
        (Some(true), Some("harness"))
    );

    // The creator may revoke a key it created, whatever it holds.
    let (s, created) = json(
        srv.post(
            "/api/keys",
            &deleter,
            json!({"name": "child", "audience": "management", "permissions": ["api_keys:create"]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = del(created["id"].as_str().unwrap().to_owned(), deleter.clone()).await;
    assert_eq!(s, 200);
    assert_eq!(
        srv.get("/api/keys", created["api_key"].as_str().unwrap())
            .await
            .status(),
        401
    );

    // Twice is a conflict; an unknown id is 404; a malformed id is 400.
    let (s, b) = del(harness_id.to_string(), admin.clone()).await;
    assert_envelope(s, &b, 409, "conflict");
    let (s, b) = del(uuid::Uuid::new_v4().to_string(), admin.clone()).await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = del("not-a-uuid".into(), admin.clone()).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid key ID");

    // The admin holds everything: it may revoke the powerful key.
    let (s, _) = del(powerful_id.to_string(), admin.clone()).await;
    assert_eq!(s, 200);
    let _ = deleter_id;
    let revoked = audit_actions(&srv, org)
        .await
        .into_iter()
        .filter(|a| a == "API_KEY_REVOKED")
        .count();
    assert_eq!(revoked, 3);
    srv.stop().await;
}

async fn self_revocation(backend: Backend) {
    let srv = TestServer::start(backend).await;
    for path in ["/allow/self/revoke", "/api/allow/self/revoke"] {
        let (org, key, id) = srv.key("acme", harness("agent")).await;
        let (s, b): (u16, Value) = json(srv.post(path, &key, json!({})).await).await;
        assert_eq!(s, 200, "{b}");
        assert_eq!(
            b,
            json!({"revoked": true, "api_key_id": id, "key_type": "harness"})
        );
        // Gone at once, and a second attempt is 401.
        let (s, b) = json(srv.post(path, &key, json!({})).await).await;
        assert_envelope(s, &b, 401, "unauthenticated");
        assert!(
            audit_actions(&srv, org)
                .await
                .contains(&"API_KEY_REVOKED".to_owned())
        );
    }
    srv.stop().await;
}

both_backends!(
    create_list_get,
    creation_never_exceeds_the_creator,
    rotation_and_grace,
    revocation_rules,
    self_revocation,
    audit_failure_aborts_or_reports
);

/// Key operations are never unaudited: creation and rotation abort with
/// their audit entry; revocation kills the key first and says so (spec 3.1).
/// The failed revocation also shows an idempotency key being released on 5xx.
async fn audit_failure_aborts_or_reports(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, _) = srv
        .key(
            "acme",
            management("admin", Permission::ALL, &[Scope::FullAccess]),
        )
        .await;
    let (_, victim, victim_id) = srv.key("acme", harness("victim")).await;
    let (_, _, rotated_id) = srv.key("acme", harness("to-rotate")).await;
    let page = warden_control_plane::store::Page { page: 1, limit: 50 };
    let keys_before = srv.store.list_keys(org, page).await.unwrap().1;
    srv.break_audit_log().await;

    let (s, b) = json(
        srv.post(
            "/api/keys",
            &admin,
            json!({"name": "x", "audience": "harness"}),
        )
        .await,
    )
    .await;
    assert_envelope(s, &b, 500, "internal_error");
    let (s, _) = json(
        srv.post(&format!("/api/keys/{rotated_id}/rotate"), &admin, json!({}))
            .await,
    )
    .await;
    assert_eq!(s, 500);
    assert_eq!(
        srv.store.list_keys(org, page).await.unwrap().1,
        keys_before,
        "nothing half-written"
    );
    let untouched = srv
        .store
        .key(org, warden_control_plane::store::KeyId(rotated_id))
        .await
        .unwrap()
        .unwrap();
    assert!(untouched.replaced_by.is_none());

    let delete = || {
        srv.request(
            Method::DELETE,
            &format!("/api/keys/{victim_id}"),
            Some(&admin),
        )
        .header("idempotency-key", "revoke-victim")
        .send()
    };
    let (s, b) = json(delete().await.unwrap()).await;
    assert_eq!(s, 500, "{b}");
    assert_eq!(
        b["error"],
        "API key revoked, but the audit write failed: the key is already dead"
    );
    assert_eq!(
        srv.get("/api/keys", &victim).await.status(),
        401,
        "the key is dead"
    );
    // The 500 released the idempotency key: the repeat runs again (and finds
    // the key already revoked) instead of replaying the 500.
    let r = delete().await.unwrap();
    assert!(r.headers().get("x-idempotent-replayed").is_none());
    assert_eq!(r.status(), 409);
    srv.stop().await;
}
