//! The store test sequence, run against both backends (CONVENTIONS item 8).

use chrono::{TimeDelta, Utc};
use serde_json::json;
use warden_control_plane::auth::{Audience, Environment, Permission, Scope};
use warden_control_plane::store::{
    self, AuditEntry, KeyId, KeyStatus, NewKey, Page, Retire, StoreError,
};

use super::support::{Backend, TestDb, both_backends};

fn new_key(org: store::OrgId, name: &str, hash: &str) -> NewKey {
    NewKey {
        org,
        name: name.into(),
        hash: hash.into(),
        display: "svc_prod_0123456****".into(),
        audience: Audience::Management,
        environment: Environment::Production,
        permissions: vec![Permission::ApiKeysCreate, Permission::AllowRulesView],
        scopes: vec![Scope::RulesRead],
        agent_id: None,
        created_by: None,
        expires_at: Some(Utc::now() + TimeDelta::days(90)),
    }
}

fn entry(org: store::OrgId, action: &str) -> AuditEntry {
    AuditEntry {
        org,
        action: action.into(),
        actor: None,
        target_type: "api_key".into(),
        target_id: String::new(),
        details: json!({"via": "test"}),
        at: Utc::now(),
    }
}

async fn store_story(backend: Backend) {
    let db = TestDb::new(backend).await;
    let s = store::open(&db.url).await.expect("opens and migrates");
    // Opening again runs no migration twice.
    let again = store::open(&db.url).await.expect("reopens");
    again.ping().await.expect("ping");

    let now = Utc::now();
    let acme = s.ensure_org("acme", now).await.unwrap();
    assert_eq!(
        s.ensure_org("acme", now).await.unwrap().id,
        acme.id,
        "ensure_org is idempotent"
    );
    let other = s.ensure_org("other", now).await.unwrap();
    assert_ne!(acme.id, other.id);
    assert_eq!(s.org_by_name("missing").await.unwrap(), None);

    // A key and its audit entry land together.
    let k = s
        .create_key(
            new_key(acme.id, "a", "h1"),
            entry(acme.id, "API_KEY_CREATED"),
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        k.permissions,
        [Permission::ApiKeysCreate, Permission::AllowRulesView]
    );
    assert_eq!(k.scopes, [Scope::RulesRead]);
    assert_eq!(k.status(now), KeyStatus::Active);
    let audit = s.audit_entries(acme.id).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        audit[0].target_id,
        k.id.0.to_string(),
        "the store fills in the new key's id"
    );

    // A duplicate hash is a conflict, and nothing is half-written.
    let dup = s
        .create_key(
            new_key(acme.id, "dup", "h1"),
            entry(acme.id, "API_KEY_CREATED"),
            now,
        )
        .await;
    assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
    assert_eq!(s.audit_entries(acme.id).await.unwrap().len(), 1);

    // Lookups: by hash anywhere, by id only within the organization.
    assert_eq!(s.key_by_hash("h1").await.unwrap().map(|k| k.id), Some(k.id));
    assert_eq!(
        s.key(acme.id, k.id).await.unwrap().map(|k| k.id),
        Some(k.id)
    );
    assert_eq!(
        s.key(other.id, k.id).await.unwrap(),
        None,
        "another organization's key is not found"
    );
    assert_eq!(
        s.key_any_org(k.id).await.unwrap().map(|k| k.org),
        Some(acme.id)
    );

    // Pagination: newest first, with the total.
    for i in 0..4 {
        let at = now + TimeDelta::seconds(i + 1);
        s.create_key(
            new_key(acme.id, &format!("k{i}"), &format!("hash{i}")),
            entry(acme.id, "API_KEY_CREATED"),
            at,
        )
        .await
        .unwrap();
    }
    let (page1, total) = s
        .list_keys(acme.id, Page { page: 1, limit: 2 })
        .await
        .unwrap();
    assert_eq!(total, 5);
    assert_eq!(
        page1.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["k3", "k2"]
    );
    let (page3, _) = s
        .list_keys(acme.id, Page { page: 3, limit: 2 })
        .await
        .unwrap();
    assert_eq!(
        page3.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(
        s.list_keys(other.id, Page { page: 1, limit: 50 })
            .await
            .unwrap()
            .1,
        0
    );

    // Rotation: the replacement exists, the old key is linked and retires.
    let grace_end = now + TimeDelta::hours(1);
    let new = s
        .rotate_key(
            acme.id,
            k.id,
            new_key(acme.id, "a", "h1-rotated"),
            Retire {
                expires_at: grace_end,
                revoke: false,
            },
            entry(acme.id, "API_KEY_ROTATED"),
            now,
        )
        .await
        .unwrap();
    let old = s.key(acme.id, k.id).await.unwrap().unwrap();
    assert_eq!(old.replaced_by, Some(new.id));
    assert_eq!(
        old.expires_at.map(|t| t.timestamp_millis()),
        Some(grace_end.timestamp_millis())
    );
    assert_eq!(old.status(now), KeyStatus::Retiring);
    assert_eq!(
        old.status(grace_end + TimeDelta::seconds(1)),
        KeyStatus::Expired
    );

    // Revocation happens once.
    assert!(s.revoke_key(acme.id, new.id, now).await.unwrap());
    assert!(!s.revoke_key(acme.id, new.id, now).await.unwrap());
    assert!(
        !s.revoke_key(other.id, k.id, now).await.unwrap(),
        "not across organizations"
    );
    assert_eq!(
        s.key(acme.id, new.id).await.unwrap().unwrap().status(now),
        KeyStatus::Revoked
    );

    // Last use is recorded.
    s.touch_key(k.id, now).await.unwrap();
    let touched = s
        .key(acme.id, k.id)
        .await
        .unwrap()
        .unwrap()
        .last_used_at
        .unwrap();
    assert_eq!(touched.timestamp_millis(), now.timestamp_millis());
    assert!(
        s.key(acme.id, KeyId(uuid::Uuid::new_v4()))
            .await
            .unwrap()
            .is_none()
    );

    let actions: Vec<String> = s
        .audit_entries(acme.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "API_KEY_ROTATED").count(),
        1
    );
    assert!(s.audit_entries(other.id).await.unwrap().is_empty());
}

both_backends!(store_story);
