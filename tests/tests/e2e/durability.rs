//! A decision is stored before it is answered: every decision a client got
//! an answer for is still there after the control plane is killed (SIGKILL)
//! in the middle of a burst of evaluations, and started again.
//!
//! This checks the order of the decision sink (commit, flush, then answer)
//! across a process death. A power loss, which only the flush protects
//! against, cannot be staged here; the flusher has unit tests of its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use warden_tests::{ControlPlane, eventually};

/// Concurrent clients, and the most evaluations each sends.
const CLIENTS: usize = 16;
const PER_CLIENT: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_decision_survives_a_kill() {
    let mut cp = ControlPlane::start_with("rate_limit_requests = 1000000");
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (url, key) = (format!("{}/allow/evaluate", cp.base), cp.admin.clone());
        let answered = answered.clone();
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            for i in 0..PER_CLIENT {
                let body = json!({
                    "agent_id": format!("burst-{client}"),
                    "target_app": "crm",
                    "action": "update_contact",
                    "context": {"n": i},
                });
                let sent = http.post(&url).bearer_auth(&key).json(&body).send().await;
                // The server is gone: this client is done.
                let Ok(response) = sent else { break };
                if response.status() != 200 {
                    break;
                }
                let Ok(decision) = response.json::<serde_json::Value>().await else {
                    break;
                };
                let id = decision["decision_id"].as_str().unwrap_or_default();
                answered.lock().unwrap().push(id.to_owned());
            }
        }));
    }
    // Kill it mid-burst: once a few hundred decisions were answered, with
    // the clients still sending.
    let progress = answered.clone();
    let midway = eventually(Duration::from_secs(30), async || {
        progress.lock().unwrap().len() >= 300
    })
    .await;
    cp.kill();
    for c in clients {
        c.await.unwrap();
    }
    assert!(midway, "the burst never reached 300 answers");
    let answered = answered.lock().unwrap().clone();
    assert!(
        answered.len() < CLIENTS * PER_CLIENT,
        "the kill came after the burst ended; it proves nothing"
    );

    cp.restart();
    let mut missing = Vec::new();
    for id in &answered {
        let (status, _) = cp
            .call(Method::GET, &format!("/v1/allow/decisions/{id}"), None)
            .await;
        if status != 200 {
            missing.push((id.clone(), status));
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} answered decisions are gone after the kill: {missing:?}",
        missing.len(),
        answered.len()
    );
}
