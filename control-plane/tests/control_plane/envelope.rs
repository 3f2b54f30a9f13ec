//! The shared conventions: the error envelope on every error path, body
//! limits, the OpenAPI document, and malformed input never causing a 500.

use proptest::prelude::*;
use reqwest::Method;
use serde_json::Value;
use warden_control_plane::config::RawConfig;
use warden_control_plane::routes::route_table;

use super::support::{Backend, TestServer, assert_envelope, both_backends, json, send};

async fn error_paths_use_the_envelope(backend: Backend) {
    let srv = TestServer::start_with(
        backend,
        RawConfig {
            max_body_bytes: Some(4096),
            ..RawConfig::default()
        },
    )
    .await;
    let admin = srv.admin("acme").await;
    let raw = |method: Method, path: &str, body: Vec<u8>| {
        let req = srv
            .request(method, path, Some(&admin))
            .header("content-type", "application/json")
            .body(body);
        async move { json(req.send().await.unwrap()).await }
    };
    let (s, b) = json(srv.get("/no/such/route", &admin).await).await;
    assert_envelope(s, &b, 404, "not_found");
    let (s, b) = raw(Method::POST, "/api/keys", b"{\"name\": ".to_vec()).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid JSON body");
    assert!(b.get("details").is_none());
    let (s, b) = raw(
        Method::POST,
        "/api/keys",
        b"{\"name\": 5, \"audience\": \"harness\"}".to_vec(),
    )
    .await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid request body");
    assert_eq!(b["details"][0]["path"], serde_json::json!(["name"]));
    let (s, b) = raw(Method::POST, "/api/keys", vec![b' '; 10_000]).await;
    assert_envelope(s, &b, 413, "payload_too_large");
    let (s, b) = json(srv.get("/api/keys?limit=1000", &admin).await).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid query parameters");
    let (s, b) = json(srv.get("/api/keys/123", &admin).await).await;
    assert_envelope(s, &b, 400, "invalid_request");
    assert_eq!(b["error"], "Invalid key ID");
    srv.stop().await;
}

async fn metrics_text(srv: &TestServer) -> String {
    srv.request(Method::GET, "/metrics", None)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn ops_endpoints(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    assert_eq!(srv.get("/api/keys", &admin).await.status(), 200);
    let health = srv
        .request(Method::GET, "/healthz", None)
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        srv.request(Method::GET, "/readyz", None)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let metrics = metrics_text(&srv).await;
    assert!(
        metrics.contains(
            "warden_http_requests_total{method=\"GET\",route=\"/api/keys\",status=\"200\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("warden_http_request_duration_seconds_bucket"));
    assert!(!metrics.contains(&admin), "metrics never carry keys");
    // A method a client made up is counted as `other`: any token is a valid
    // method, and each one as a label would be a new series (unbounded).
    for made_up in ["BREW", "WHEN"] {
        srv.request(
            Method::from_bytes(made_up.as_bytes()).unwrap(),
            "/healthz",
            None,
        )
        .send()
        .await
        .unwrap();
    }
    let metrics = metrics_text(&srv).await;
    assert!(metrics.contains("method=\"other\""), "{metrics}");
    // Group commits are counted by size: two decisions, one after the
    // other, are two commits of one row.
    assert!(
        metrics.contains("warden_decision_batch_rows_count 0"),
        "{metrics}"
    );
    for action in ["read_contact", "update_contact"] {
        let body = serde_json::json!({"agent_id": "ops", "target_app": "crm", "action": action});
        let (s, _) = send(&srv, Method::POST, "/allow/evaluate", &admin, Some(body)).await;
        assert_eq!(s, 200);
    }
    let metrics = metrics_text(&srv).await;
    assert!(
        metrics.contains("warden_decision_batch_rows_count 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("warden_decision_batch_rows_sum 2.0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("warden_decision_commit_seconds_count 2"),
        "{metrics}"
    );
    // SQLite's commits wait for the flusher; PostgreSQL's include the flush.
    let flushes = match backend {
        Backend::Sqlite => 2,
        Backend::Postgres => 0,
    };
    assert!(
        metrics.contains(&format!("warden_decision_flush_seconds_count {flushes}")),
        "{metrics}"
    );
    assert!(
        !metrics.contains("BREW") && !metrics.contains("WHEN"),
        "{metrics}"
    );

    // The OpenAPI document parses and lists every route of the table.
    let (s, doc): (u16, Value) = json(
        srv.request(Method::GET, "/openapi.json", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for route in route_table() {
        let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
        assert!(
            op.is_object(),
            "{} {} is in the OpenAPI document",
            route.method,
            route.path
        );
    }
    srv.stop().await;
}

both_backends!(error_paths_use_the_envelope, ops_endpoints);

/// Bodies a JSON extractor should survive: broken syntax, wrong types, odd
/// UTF-8, deep nesting, huge numbers.
fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        "[{}\\[\\]\":,a-z0-9 \\\\]{0,80}".prop_map(String::into_bytes),
        (0usize..300).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        Just(b"{\"name\": \"\xff\xfe\", \"audience\": \"management\"}".to_vec()),
        Just(b"{\"name\": \"a\", \"audience\": \"management\", \"permissions\": [1e999]}".to_vec()),
        Just(b"{\"name\": \"a\", \"audience\": \"management\", \"extra\": true}".to_vec()),
        Just(b"{\"name\": \"a\", \"audience\": \"management\", \"permissions\": \"all\"}".to_vec()),
        Just(b"\"just a string\"".to_vec()),
        Just(b"null".to_vec()),
    ]
}

#[test]
fn malformed_bodies_always_get_a_4xx_envelope() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let srv = rt.block_on(TestServer::start(Backend::Sqlite));
    let admin = rt.block_on(srv.admin("acme"));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(
                hostile_body(),
                prop::sample::select(vec!["/api/keys", "/allow/self/revoke"]),
            ),
            |(body, path)| {
                let path = if path == "/allow/self/revoke" {
                    "/api/keys/00000000-0000-0000-0000-000000000000/rotate"
                } else {
                    path
                };
                let (status, value) = rt.block_on(async {
                    json(
                        srv.request(Method::POST, path, Some(&admin))
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await
                            .unwrap(),
                    )
                    .await
                });
                prop_assert!(
                    (400..500).contains(&status) || status == 201,
                    "{status} {value}"
                );
                if status != 201 {
                    prop_assert!(
                        value["code"].is_string() && value["error"].is_string(),
                        "{value}"
                    );
                }
                Ok(())
            },
        )
        .unwrap();
    rt.block_on(srv.stop());
}
