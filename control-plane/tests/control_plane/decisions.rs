//! The decision write path (the sink's group commit) on both backends.
//! SQLite stores these rows through its own writer connection, not sqlx, so
//! these tests hold it to what the sqlx reads expect: every field comes back
//! as written, a batch commits whole or not at all, and one bad row in a
//! group commit fails alone.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use warden_control_plane::record::LogRecorder;
use warden_control_plane::sink::DecisionSink;
use warden_control_plane::store::{
    self, ActionDecision, AuditFilter, DecisionBatch, HitlItem, OrgId, Page, RetrievalDecision,
    StoreError,
};
use warden_engine::model::{AgentMode, Decision, ReasonCode};

use super::support::{Backend, TestDb, both_backends};

/// A time both backends keep exactly (PostgreSQL keeps microseconds).
fn at(minutes_ago: i64) -> DateTime<Utc> {
    let t = DateTime::parse_from_rfc3339("2026-11-22T10:00:00.123456Z")
        .unwrap()
        .with_timezone(&Utc);
    t - TimeDelta::minutes(minutes_ago)
}

/// An action decision with every optional field set.
fn full_action(org: OrgId) -> ActionDecision {
    ActionDecision {
        id: uuid::Uuid::now_v7(),
        org,
        agent_id: "payer".into(),
        target_app: "bank".into(),
        action: "wire_money".into(),
        context: json!({"amount": 120, "to": "****", "nested": {"ok": true, "list": [1, "two"]}}),
        decision: Decision::Permit,
        would_decide: Some(Decision::Deny),
        reason: "Monitor: wires need a human".into(),
        reason_code: Some(ReasonCode::MonitorMode),
        rule_id: Some(uuid::Uuid::new_v4()),
        rule_code: Some("R-0007".into()),
        enforced: false,
        agent_mode: AgentMode::Monitor,
        floor_detectors: vec!["email".into(), "iban".into()],
        source: "server".into(),
        hitl_result: Some("approved".into()),
        hitl_responded_at: Some(at(1)),
        hitl_responded_by: Some("ops@example.com".into()),
        execution_result: Some("success".into()),
        execution_completed_at: Some(at(0)),
        execution_details: Some("200".into()),
        created_at: at(3),
    }
}

/// An action decision with every optional field empty.
fn bare_action(org: OrgId) -> ActionDecision {
    ActionDecision {
        id: uuid::Uuid::now_v7(),
        org,
        agent_id: "payer".into(),
        target_app: "bank".into(),
        action: "read_balance".into(),
        context: json!({}),
        decision: Decision::Permit,
        would_decide: None,
        reason: String::new(),
        reason_code: None,
        rule_id: None,
        rule_code: None,
        enforced: true,
        agent_mode: AgentMode::Enforce,
        floor_detectors: vec![],
        source: "server".into(),
        hitl_result: None,
        hitl_responded_at: None,
        hitl_responded_by: None,
        execution_result: None,
        execution_completed_at: None,
        execution_details: None,
        created_at: at(2),
    }
}

fn gate_for(d: &ActionDecision) -> HitlItem {
    HitlItem {
        id: uuid::Uuid::new_v4(),
        org: d.org,
        decision_id: Some(d.id),
        agent_id: d.agent_id.clone(),
        target_app: d.target_app.clone(),
        action: d.action.clone(),
        context: d.context.clone(),
        category: "enduser".into(),
        status: "pending".into(),
        ai_recommended_rule: Some("deny wires over 100".into()),
        notified_via: vec!["webhook".into()],
        resolution: None,
        dedupe_key: None,
        expires_at: Some(at(-2)),
        responded_at: None,
        responded_by: None,
        created_at: at(3),
    }
}

fn retrieval(org: OrgId) -> RetrievalDecision {
    RetrievalDecision {
        id: uuid::Uuid::now_v7(),
        org,
        agent_id: "reader".into(),
        operation: "retrieve".into(),
        resource_type: "document".into(),
        resource_metadata: json!({"path": "/hr/salaries.pdf", "owner": "****"}),
        query: Some("salaries 2026".into()),
        surface: Some("chat".into()),
        trust_tier: Some("tier2".into()),
        decision: Decision::Deny,
        would_decide: None,
        reason: "tier too low".into(),
        reason_code: ReasonCode::TierMismatch,
        rule_id: Some(uuid::Uuid::new_v4()),
        enforced: true,
        agent_mode: AgentMode::Enforce,
        floor_detectors: vec!["email".into()],
        created_at: at(1),
    }
}

async fn batches_round_trip_and_commit_whole(backend: Backend) {
    let db = TestDb::new(backend).await;
    let s = store::open(&db.url).await.unwrap();
    let org = s.ensure_org("acme", Utc::now()).await.unwrap().id;

    let (full, bare, found) = (full_action(org), bare_action(org), retrieval(org));
    let gate = gate_for(&full);
    let batch = DecisionBatch {
        actions: vec![full.clone(), bare.clone()],
        gates: vec![gate.clone()],
        retrievals: vec![found.clone()],
    };
    s.insert_decisions(Arc::new(batch)).await.unwrap();

    // Every field reads back as written.
    assert_eq!(
        s.action_decision(org, full.id).await.unwrap(),
        Some(full.clone())
    );
    assert_eq!(
        s.action_decision(org, bare.id).await.unwrap(),
        Some(bare.clone())
    );
    assert_eq!(s.hitl_for_decision(org, full.id).await.unwrap(), Some(gate));
    let (log, total) = s
        .retrieval_log(org, &AuditFilter::default(), Page { page: 1, limit: 10 })
        .await
        .unwrap();
    assert_eq!((log, total), (vec![found], 1));
    // The audit log's time filter compares the stored text: a row written
    // by either path is inside its own creation time.
    let filter = AuditFilter {
        start: Some(full.created_at),
        end: Some(full.created_at),
        ..AuditFilter::default()
    };
    let (log, _) = s
        .action_log(org, &filter, Page { page: 1, limit: 10 })
        .await
        .unwrap();
    assert_eq!(log.iter().map(|d| d.id).collect::<Vec<_>>(), vec![full.id]);

    // A batch holding a stored id is refused whole: its new row is not kept.
    let fresh = bare_action(org);
    let replay = DecisionBatch {
        actions: vec![fresh.clone(), full.clone()],
        ..DecisionBatch::default()
    };
    let refused = s.insert_decisions(Arc::new(replay)).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(s.action_decision(org, fresh.id).await.unwrap(), None);

    // A decision of an organization that does not exist (the API never
    // makes one: org_id comes from the authenticated key). SQLite refuses
    // it by its foreign key. PostgreSQL's decision tables have none
    // (migration 0008: the per-row check was a fifth of its work per
    // decision), so it is stored where no organization can read it.
    let stray = bare_action(OrgId(uuid::Uuid::new_v4()));
    let outcome = s
        .insert_decisions(Arc::new(DecisionBatch {
            actions: vec![stray.clone()],
            ..DecisionBatch::default()
        }))
        .await;
    match backend {
        Backend::Sqlite => assert!(outcome.is_err(), "{outcome:?}"),
        Backend::Postgres => {
            outcome.unwrap();
            assert_eq!(s.action_decision(org, stray.id).await.unwrap(), None);
        }
    }
}

// Guards the sink's fallback: a row that fails in a group commit is written
// again alone, so its neighbours are stored and answered `Ok`.
async fn one_bad_row_fails_alone(backend: Backend) {
    let db = TestDb::new(backend).await;
    let s = store::open(&db.url).await.unwrap();
    let org = s.ensure_org("acme", Utc::now()).await.unwrap().id;
    let stored = bare_action(org);
    s.insert_decisions(Arc::new(DecisionBatch {
        actions: vec![stored.clone()],
        ..DecisionBatch::default()
    }))
    .await
    .unwrap();

    let sink = DecisionSink::start(s.clone(), Arc::new(LogRecorder), Arc::default());
    let fresh: Vec<ActionDecision> = (0..16).map(|_| bare_action(org)).collect();
    // Submitted together, so that they queue into the same batches as the
    // replayed id.
    let mut rows = fresh.clone();
    rows.insert(7, stored.clone());
    let outcomes =
        futures_util::future::join_all(rows.into_iter().map(|d| sink.action(d, None))).await;
    assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 1);
    assert!(outcomes[7].is_err());
    for d in &fresh {
        assert_eq!(
            s.action_decision(org, d.id).await.unwrap().as_ref(),
            Some(d)
        );
    }
}

both_backends!(batches_round_trip_and_commit_whole, one_bad_row_fails_alone);

// The decision writer is a second connection to the database file; an
// in-memory database would be a different, empty one for it.
#[tokio::test]
async fn in_memory_sqlite_is_refused_with_the_fix() {
    for url in ["sqlite::memory:", "sqlite://?mode=memory"] {
        let err = store::open(url).await.err().expect("refused");
        assert!(err.to_string().contains("give a file path"), "{err}");
    }
}

/// A batch of `rows` action decisions, each with a note of about `len`
/// bytes in its context.
fn notes(org: OrgId, rows: usize, len: usize) -> Arc<DecisionBatch> {
    let actions = (0..rows)
        .map(|i| ActionDecision {
            context: json!({"note": format!("{i}: {}", "x".repeat(len))}),
            ..bare_action(org)
        })
        .collect();
    Arc::new(DecisionBatch {
        actions,
        ..DecisionBatch::default()
    })
}

// Guards the decision writer's checkpoints: no connection checkpoints by
// itself (`wal_autocheckpoint=0`), so without them stored decisions would
// stay in the WAL until the last connection closed; an idle writer copies
// what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_decisions_reach_the_database_file_while_it_runs() {
    let db = TestDb::new(Backend::Sqlite).await;
    let s = store::open(&db.url).await.unwrap();
    let org = s.ensure_org("acme", Utc::now()).await.unwrap().id;
    let file = std::path::PathBuf::from(db.url.trim_start_matches("sqlite://"));
    let before = std::fs::metadata(&file).unwrap().len();
    s.insert_decisions(notes(org, 200, 500)).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = std::fs::metadata(&file).unwrap().len();
        if now > before + 100 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {now} bytes (from {before}): nothing was checkpointed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

// Guards the WAL's size under a writer that commits without pause: a
// checkpointer on a thread of its own never caught up with the end of the
// WAL, so SQLite never started it over, and the file grew by every frame
// ever committed (~50 MB a second under load). The writer now checkpoints
// between its own commits, and the WAL starts over from its beginning: the
// checkpoint sequence number in the WAL's header counts the restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_wal_starts_over_while_decisions_commit_without_pause() {
    let db = TestDb::new(Backend::Sqlite).await;
    let s = store::open(&db.url).await.unwrap();
    let org = s.ensure_org("acme", Utc::now()).await.unwrap().id;
    let wal = std::path::PathBuf::from(format!("{}-wal", db.url.trim_start_matches("sqlite://")));
    // The big-endian checkpoint sequence number, bytes 12-15 of the header.
    let restarts = || {
        use std::io::Read;
        let mut header = [0u8; 16];
        std::fs::File::open(&wal)
            .and_then(|mut f| f.read_exact(&mut header))
            .unwrap();
        u32::from_be_bytes([header[12], header[13], header[14], header[15]])
    };
    let mut first = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for commits in 0..100_000 {
        s.insert_decisions(notes(org, 4, 300)).await.unwrap();
        let now = restarts();
        let first = *first.get_or_insert(now);
        if now >= first + 2 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL never started over in {commits} back-to-back commits"
        );
    }
    panic!("the WAL never started over in 100000 back-to-back commits");
}
