//! Idempotent writes over HTTP (spec §8).

use chrono::{TimeDelta, Utc};
use reqwest::Method;
use warden_control_plane::auth::Scope;
use warden_control_plane::idempotency::request_hash;
use warden_control_plane::store::{IdemKey, KeyId};

use super::support::{
    Backend, TestServer, assert_envelope, both_backends, harness, json, management,
};

async fn replay_reuse_and_scope(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let (_, _, victim) = srv.key("acme", harness("victim")).await;
    let (_, _, other_victim) = srv.key("acme", harness("other")).await;
    let delete = |id: uuid::Uuid, header: &'static str, key: &str, who: &str| {
        srv.request(Method::DELETE, &format!("/api/keys/{id}"), Some(who))
            .header(header, key)
            .send()
    };

    let first = delete(victim, "idempotency-key", "k-1", &admin)
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("x-idempotent-replayed").is_none());
    let first_body = first.text().await.unwrap();

    // The same request again: the stored answer, not a 409 "already revoked".
    let again = delete(victim, "idempotency-key", "k-1", &admin)
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["x-idempotent-replayed"], "true");
    assert_eq!(again.headers()["content-type"], "application/json");
    assert!(again.headers().contains_key("x-ratelimit-remaining"));
    assert_eq!(again.text().await.unwrap(), first_body);
    // The legacy header names the same key.
    let legacy = delete(victim, "x-idempotency-key", "k-1", &admin)
        .await
        .unwrap();
    assert_eq!(legacy.headers()["x-idempotent-replayed"], "true");

    // The same key for another request: 422.
    let (s, b) = json(
        delete(other_victim, "idempotency-key", "k-1", &admin)
            .await
            .unwrap(),
    )
    .await;
    assert_envelope(s, &b, 422, "idempotency_key_reused");

    // Keys are per credential: another key may use the same value.
    let (_, other_admin, _) = srv
        .key(
            "acme",
            management(
                "second",
                warden_control_plane::auth::Permission::ALL,
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (s, _) = json(
        delete(other_victim, "idempotency-key", "k-1", &other_admin)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200);

    // A 4xx is stored too.
    let missing = uuid::Uuid::new_v4();
    let (s, _) = json(
        delete(missing, "idempotency-key", "k-404", &admin)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 404);
    let replayed = delete(missing, "idempotency-key", "k-404", &admin)
        .await
        .unwrap();
    assert_eq!(
        (
            replayed.status().as_u16(),
            replayed.headers().contains_key("x-idempotent-replayed")
        ),
        (404, true)
    );

    // Malformed keys, and the two headers disagreeing.
    for (h1, h2) in [
        (Some("has space"), None),
        (Some("a"), Some("b")),
        (Some(&*"k".repeat(257)), None),
    ] {
        let mut req = srv.request(
            Method::DELETE,
            &format!("/api/keys/{missing}"),
            Some(&admin),
        );
        if let Some(v) = h1 {
            req = req.header("idempotency-key", v);
        }
        if let Some(v) = h2 {
            req = req.header("x-idempotency-key", v);
        }
        let (s, b) = json(req.send().await.unwrap()).await;
        assert_envelope(s, &b, 400, "invalid_idempotency_key");
    }
    srv.stop().await;
}

async fn in_flight_and_abandoned(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let (org, admin, admin_id) = srv
        .key(
            "acme",
            management(
                "admin",
                warden_control_plane::auth::Permission::ALL,
                &[Scope::FullAccess],
            ),
        )
        .await;
    let (_, _, victim) = srv.key("acme", harness("victim")).await;
    let path = format!("/api/keys/{victim}");
    let hash = request_hash("DELETE", &path, None, b"");
    let now = Utc::now();
    let id = |key| IdemKey {
        org,
        credential: KeyId(admin_id),
        key,
    };

    // The first request is still running (claimed just now): 409 after a brief wait.
    srv.store
        .idem_claim(id("busy"), &hash, now, now + TimeDelta::hours(24))
        .await
        .unwrap();
    let (s, b) = json(
        srv.request(Method::DELETE, &path, Some(&admin))
            .header("idempotency-key", "busy")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_envelope(s, &b, 409, "idempotency_request_in_flight");

    // Held for over two minutes without finishing: abandoned, this request runs.
    let long_ago = now - TimeDelta::minutes(3);
    srv.store
        .idem_claim(
            id("stale"),
            &hash,
            long_ago,
            long_ago + TimeDelta::hours(24),
        )
        .await
        .unwrap();
    let r = srv
        .request(Method::DELETE, &path, Some(&admin))
        .header("idempotency-key", "stale")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-idempotent-replayed").is_none());
    srv.stop().await;
}

/// The idempotency store cannot answer: a request with a key is refused
/// (503, not processed); one without a key is served.
async fn store_outage_fails_closed(backend: Backend) {
    let srv = TestServer::start(backend).await;
    let admin = srv.admin("acme").await;
    let (_, _, victim_id) = srv.key("acme", harness("victim")).await;
    srv.execute(&["DROP TABLE idempotency"]).await;
    let r = srv
        .request(
            Method::DELETE,
            &format!("/api/keys/{victim_id}"),
            Some(&admin),
        )
        .header("idempotency-key", "k")
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("retry-after"));
    let (s, b) = json(r).await;
    assert_envelope(s, &b, 503, "rate_limiter_unavailable");
    let stored = srv
        .store
        .key_any_org(KeyId(victim_id))
        .await
        .unwrap()
        .unwrap();
    assert!(stored.revoked_at.is_none(), "not processed");
    let r = srv
        .request(
            Method::DELETE,
            &format!("/api/keys/{victim_id}"),
            Some(&admin),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    srv.stop().await;
}

both_backends!(
    replay_reuse_and_scope,
    in_flight_and_abandoned,
    store_outage_fails_closed
);
