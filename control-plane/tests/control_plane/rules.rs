//! The rules collection over HTTP: one collection, three surfaces (spec
//! 2.3, 4.1-4.3), validation by the engine, and the emergency bypass (3.6).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Backend, TestServer, assert_envelope, both_backends, send};

const DENY_DELETES: &str =
    "package r\ndecision := \"deny\" if startswith(input.action, \"delete_\")";
const REDACT_SSN: &str = "package r\ndecision := \"redact\" if input.resource_type == \"hr_record\"\nredactions := [{\"field\": \"ssn\"}]";

fn names(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn one_collection_three_surfaces(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;

    let (s, a) = send(
        &srv,
        Method::POST,
        "/allow/rules",
        &admin,
        Some(json!({"name": "no deletes", "rego_source": DENY_DELETES, "priority": 5})),
    )
    .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(
        (a["rule_code"].as_str(), a["effect"].as_str()),
        (Some("R-0001"), Some("deny"))
    );
    assert_eq!(a["applies_to"], json!(["action"]));
    assert_eq!(
        (a["enabled"].as_bool(), a["rego_source"].as_str()),
        (Some(true), Some(DENY_DELETES))
    );

    let (s, r) = send(
        &srv,
        Method::POST,
        "/rules",
        &admin,
        Some(json!({"operations": ["retrieval", "retrieval"], "name": "hr redaction", "rego_source": REDACT_SSN, "priority": 9, "trust_tier": "tier2"})),
    )
    .await;
    assert_eq!(s, 201, "{r}");
    assert_eq!(
        (r["rule_code"].as_str(), r["effect"].as_str()),
        (Some("R-0002"), Some("redact"))
    );
    assert_eq!(r["applies_to"], json!(["retrieval"]), "deduplicated");

    // A rule created through one surface appears through the others;
    // lists are priority descending and omit the source.
    for path in ["/rules", "/allow/rules", "/recall/rules"] {
        let (s, list) = send(&srv, Method::GET, path, &admin, None).await;
        assert_eq!(s, 200);
        assert_eq!(names(&list), ["hr redaction", "no deletes"], "{path}");
        assert!(list["data"][0].get("rego_source").is_none());
        assert_eq!(list["total"], 2);
    }
    let (_, only) = send(&srv, Method::GET, "/rules?operations=action", &admin, None).await;
    assert_eq!(names(&only), ["no deletes"]);
    let (s, b) = send(&srv, Method::GET, "/rules?operations=bogus", &admin, None).await;
    assert_envelope(s, &b, 400, "invalid_request");
    let (_, paged) = send(&srv, Method::GET, "/rules?limit=1&page=2", &admin, None).await;
    assert_eq!(names(&paged), ["no deletes"]);

    // Single reads carry the source, on every surface.
    let id = a["id"].as_str().unwrap();
    for path in [format!("/rules/{id}"), format!("/recall/rules/{id}")] {
        let (s, one) = send(&srv, Method::GET, &path, &admin, None).await;
        assert_eq!((s, one["rego_source"].as_str()), (200, Some(DENY_DELETES)));
    }

    // Update: partial; operations rewrite applies_to; the effect follows the source.
    let (s, up) = send(&srv, Method::PUT, &format!("/rules/{id}"), &admin, Some(json!({"operations": ["action", "delegation"], "rego_source": "package r\ndecision := \"permit\" if input.action == \"x\""}))).await;
    assert_eq!(s, 200, "{up}");
    assert_eq!(
        (
            up["applies_to"].clone(),
            up["effect"].as_str(),
            up["priority"].as_i64()
        ),
        (json!(["action", "delegation"]), Some("permit"), Some(5))
    );
    let (s, b) = send(
        &srv,
        Method::PUT,
        &format!("/allow/rules/{id}"),
        &admin,
        Some(json!({})),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "No fields to update");
    let (s, b) = send(
        &srv,
        Method::PUT,
        &format!("/allow/rules/{id}"),
        &admin,
        Some(json!({"name": "hr redaction"})),
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");
    let (s, up) = send(
        &srv,
        Method::PUT,
        &format!("/recall/rules/{}", r["id"].as_str().unwrap()),
        &admin,
        Some(json!({"trust_tier": null})),
    )
    .await;
    assert_eq!(
        (s, up["trust_tier"].clone()),
        (200, Value::Null),
        "null clears"
    );

    // Delete; codes are never reused.
    let (s, d) = send(
        &srv,
        Method::DELETE,
        &format!("/allow/rules/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!((s, d), (200, json!({"deleted": true})));
    let (s, b) = send(&srv, Method::GET, &format!("/rules/{id}"), &admin, None).await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = send(&srv, Method::DELETE, &format!("/rules/{id}"), &admin, None).await;
    assert_envelope(s, &b, 404, "not_found");
    let (_, c) = send(
        &srv,
        Method::POST,
        "/recall/rules",
        &admin,
        Some(json!({"name": "third", "rego_source": REDACT_SSN})),
    )
    .await;
    assert_eq!(c["rule_code"], "R-0003");
    let (s, b) = send(&srv, Method::GET, "/rules/not-a-uuid", &admin, None).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid rule ID");
    srv.stop().await;
}

async fn invalid_rules_are_refused_and_nothing_is_stored(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let cases = [
        (
            "/allow/rules",
            json!({"name": "syntax", "rego_source": "package r\ndecision := \"deny\" if {\n  input.action ==\n"}),
            "rego_source",
        ),
        (
            "/allow/rules",
            json!({"name": "wrong word", "rego_source": "package r\ndecision := \"allow\" if input.action == \"x\""}),
            "rego_source",
        ),
        (
            "/recall/rules",
            json!({"name": "wrong word", "rego_source": "package r\ndecision := \"mask\" if true"}),
            "rego_source",
        ),
        (
            "/rules",
            json!({"name": "no ops", "rego_source": DENY_DELETES}),
            "operations",
        ),
        (
            "/rules",
            json!({"operations": [], "name": "empty ops", "rego_source": DENY_DELETES}),
            "operations",
        ),
        (
            "/rules",
            json!({"operations": ["writes"], "name": "bad op", "rego_source": DENY_DELETES}),
            "operations",
        ),
        (
            "/allow/rules",
            json!({"operations": ["action"], "name": "ops here", "rego_source": DENY_DELETES}),
            "operations",
        ),
        (
            "/allow/rules",
            json!({"name": "x".repeat(256), "rego_source": DENY_DELETES}),
            "name",
        ),
        ("/allow/rules", json!({"rego_source": DENY_DELETES}), "name"),
        ("/allow/rules", json!({"name": "no source"}), "rego_source"),
        (
            "/allow/rules",
            json!({"name": "too long", "rego_source": format!("package r\n#{}", "x".repeat(100_000))}),
            "rego_source",
        ),
        (
            "/recall/rules",
            json!({"name": "tier", "rego_source": REDACT_SSN, "trust_tier": "gold"}),
            "trust_tier",
        ),
        (
            "/recall/rules",
            json!({"name": "surface", "rego_source": REDACT_SSN, "surface": "s".repeat(101)}),
            "surface",
        ),
    ];
    for (path, body, field) in cases {
        let (s, b) = send(&srv, Method::POST, path, &admin, Some(body.clone())).await;
        assert_envelope(s, &b, 400, "invalid_request");
        assert_eq!(b["error"], "Invalid request body", "{body}");
        let paths: Vec<&Value> = b["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["path"][0])
            .collect();
        assert!(paths.iter().any(|p| *p == field), "{path} {body}: {b}");
    }
    // A syntax error says where.
    let (_, b) = send(&srv, Method::POST, "/allow/rules", &admin, Some(json!({"name": "syntax", "rego_source": "package r\ndecision := \"deny\" if {\n  input.action ==\n"}))).await;
    let d = &b["details"][0];
    assert!(
        d["line"].as_u64().is_some_and(|l| l >= 3) && d["column"].as_u64().is_some(),
        "{b}"
    );
    let (_, list) = send(&srv, Method::GET, "/rules", &admin, None).await;
    assert_eq!(list["total"], 0, "nothing stored");
    srv.stop().await;
}

async fn tenants_see_only_their_rules(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let a = srv.admin("org-a").await;
    let b = srv.admin("org-b").await;
    let (_, ra) = send(
        &srv,
        Method::POST,
        "/allow/rules",
        &a,
        Some(json!({"name": "same", "rego_source": DENY_DELETES})),
    )
    .await;
    let (s, rb) = send(
        &srv,
        Method::POST,
        "/allow/rules",
        &b,
        Some(json!({"name": "same", "rego_source": DENY_DELETES})),
    )
    .await;
    assert_eq!(s, 201, "names are unique per organization only");
    assert_eq!(
        (ra["rule_code"].as_str(), rb["rule_code"].as_str()),
        (Some("R-0001"), Some("R-0001"))
    );
    let id = ra["id"].as_str().unwrap();
    for (method, path, body) in [
        (Method::GET, format!("/rules/{id}"), None),
        (
            Method::PUT,
            format!("/rules/{id}"),
            Some(json!({"priority": 1})),
        ),
        (Method::DELETE, format!("/allow/rules/{id}"), None),
        (
            Method::POST,
            format!("/recall/rules/{id}/bypass"),
            Some(json!({"reason": "x"})),
        ),
    ] {
        let (s, body) = send(&srv, method, &path, &b, body).await;
        assert_envelope(s, &body, 404, "not_found");
    }
    let (_, list) = send(&srv, Method::GET, "/rules", &b, None).await;
    assert_eq!(list["total"], 1);
    srv.stop().await;
}

async fn emergency_bypass(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, admin_id) = srv
        .key(
            "acme",
            super::support::management(
                "admin",
                warden_control_plane::auth::Permission::ALL,
                &[warden_control_plane::auth::Scope::FullAccess],
            ),
        )
        .await;
    let (_, r) = send(
        &srv,
        Method::POST,
        "/recall/rules",
        &admin,
        Some(json!({"name": "hr", "rego_source": REDACT_SSN})),
    )
    .await;
    let path = format!("/recall/rules/{}/bypass", r["id"].as_str().unwrap());

    let (s, on) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"reason": "incident 42", "duration_seconds": 3600})),
    )
    .await;
    assert_eq!(s, 200, "{on}");
    assert_eq!(
        (on["bypass_active"].as_bool(), on["bypass_reason"].as_str()),
        (Some(true), Some("incident 42"))
    );
    assert_eq!(on["bypass_activated_by"], admin_id.to_string());
    assert!(on["bypass_expires_at"].is_string() && on["bypass_activated_at"].is_string());
    assert!(on["rego_source"].is_string(), "the full rule");
    let (s, b) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_envelope(s, &b, 409, "conflict");
    // While active, a request reaching the rule is allowed with EMERGENCY_BYPASS.
    send(
        &srv,
        Method::PUT,
        "/allow/settings",
        &admin,
        Some(json!({"default_agent_mode": "enforce"})),
    )
    .await;
    let hr = json!({"agent_id": "reader", "operation": "retrieve", "resource_type": "hr_record"});
    let (_, d) = send(
        &srv,
        Method::POST,
        "/recall/evaluate",
        &admin,
        Some(hr.clone()),
    )
    .await;
    assert_eq!(
        (d["decision"].as_str(), d["reason_code"].as_str()),
        (Some("allow"), Some("EMERGENCY_BYPASS"))
    );

    let (s, off) = send(&srv, Method::DELETE, &path, &admin, None).await;
    assert_eq!(s, 200);
    let (_, d) = send(&srv, Method::POST, "/recall/evaluate", &admin, Some(hr)).await;
    assert_eq!(d["decision"], "redact", "the rule enforces again");
    assert_eq!(
        (off["bypass_active"].as_bool(), off["bypass_reason"].clone()),
        (Some(false), Value::Null)
    );
    let (s, b) = send(&srv, Method::DELETE, &path, &admin, None).await;
    assert_envelope(s, &b, 409, "conflict");

    for body in [
        json!({}),
        json!({"reason": "r", "duration_seconds": 0}),
        json!({"reason": "r", "expires_at": "2001-01-01T00:00:00Z"}),
        json!({"reason": "r", "duration_seconds": 5, "expires_at": "2999-01-01T00:00:00Z"}),
    ] {
        let (s, b) = send(&srv, Method::POST, &path, &admin, Some(body.clone())).await;
        assert_envelope(s, &b, 400, "invalid_request");
    }

    // A bypass that expires is over at its expiry: a new one may start.
    let (s, _) = send(
        &srv,
        Method::POST,
        &path,
        &admin,
        Some(json!({"reason": "brief", "duration_seconds": 1})),
    )
    .await;
    assert_eq!(s, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _) = send(
            &srv,
            Method::POST,
            &path,
            &admin,
            Some(json!({"reason": "after expiry"})),
        )
        .await;
        if s == 200 {
            break;
        }
        assert_eq!(s, 409);
        assert!(Instant::now() < deadline, "the bypass never lapsed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let audit: Vec<_> = srv
        .store
        .audit_entries(org)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.target_type == "rule")
        .collect();
    assert_eq!(
        audit.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
        [
            "EMERGENCY_BYPASS_ACTIVATED",
            "EMERGENCY_BYPASS_DEACTIVATED",
            "EMERGENCY_BYPASS_ACTIVATED",
            "EMERGENCY_BYPASS_ACTIVATED"
        ]
    );
    assert!(
        audit
            .iter()
            .all(|e| e.details["reason_code"] == "EMERGENCY_BYPASS")
    );
    srv.stop().await;
}

both_backends!(
    one_collection_three_surfaces,
    invalid_rules_are_refused_and_nothing_is_stored,
    tenants_see_only_their_rules,
    emergency_bypass
);
