//! `warden-quickstart`: Warden's main job in one command, on the embedded
//! default.
//!
//! It starts the real control plane (SQLite in a temporary directory) and
//! the real sidecar in this process, on loopback ports; creates an agent and
//! a handful of rules (three from `examples/rules/`) through the HTTP API;
//! starts a small MCP tool server and a small HTTP tool API; and drives a
//! scripted agent through the sidecar. Each call prints what was decided, by
//! which rule, what the tool received and what the agent saw. It exits
//! non-zero if any call did not behave as shown.
//!
//! Layout: [`stack`] starts Warden, [`demo`] the tools, [`agent`] is the
//! scripted client, [`report`] prints. The tour itself is this file.

mod agent;
mod demo;
mod report;
mod stack;

use std::cell::Cell;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use reqwest::Method;
use serde_json::{Value, json};

use agent::{Answer, McpSession, http_call};
use demo::{CUSTOMER_API_KEY, Inbox, Received};
use report::{Row, Scrape};
use stack::{AGENT, Plane, Sidecar};

#[derive(Debug, Parser)]
#[command(
    name = "warden-quickstart",
    version,
    about = "Runs Warden's control plane and sidecar and governs a scripted agent"
)]
struct Cli {
    /// Leaves the servers running after the tour (Ctrl-C stops them).
    #[arg(long)]
    keep_running: bool,
    /// Keeps the SQLite database here instead of a temporary directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// The quickstart's own rule: never drop databases.
const NO_DROPS: &str = r#"package quickstart.no_drops

import rego.v1

decision := "deny" if {
	input.target_app == "crm"
	startswith(input.action, "drop_")
}

reason := "agents never drop databases"
"#;

/// An example rule pack: its create request and its policy.
struct Pack {
    dir: &'static str,
    meta: &'static str,
    rego: &'static str,
}

const PACKS: [Pack; 3] = [
    Pack {
        dir: "destructive-needs-approval",
        meta: include_str!("../../rules/destructive-needs-approval/rule.json"),
        rego: include_str!("../../rules/destructive-needs-approval/policy.rego"),
    },
    Pack {
        dir: "crm-pii-masking",
        meta: include_str!("../../rules/crm-pii-masking/rule.json"),
        rego: include_str!("../../rules/crm-pii-masking/policy.rego"),
    },
    Pack {
        dir: "secrets-never-leave",
        meta: include_str!("../../rules/secrets-never-leave/rule.json"),
        rego: include_str!("../../rules/secrets-never-leave/policy.rego"),
    },
];

/// What one call produced, from every side.
struct Observed {
    answer: Answer,
    received: Vec<Received>,
    /// The control plane's audit-log entry for the call's action.
    audit: Value,
    /// Decisions the sidecar counted (retrievals of results included).
    counted: Vec<String>,
}

/// The tour's state: Warden, the tools, and the agent's clients.
struct Tour {
    plane: Plane,
    sidecar: Sidecar,
    inbox: Inbox,
    http: reqwest::Client,
    calls: Cell<usize>,
    failed: Cell<usize>,
}

impl Tour {
    /// How many of the agent's audit-log entries are for `action`, and the
    /// log's first page (newest first). The tour makes about ten entries, so
    /// one page of 100 holds them all.
    async fn audit_count(&self, action: &str) -> anyhow::Result<(usize, Value)> {
        let log = self
            .plane
            .expect(
                Method::GET,
                &format!("/v1/allow/audit-log?agent_id={AGENT}&limit=100"),
                None,
                200,
            )
            .await?;
        let n = log["data"]
            .as_array()
            .map_or(0, |d| d.iter().filter(|e| e["action"] == action).count());
        Ok((n, log))
    }

    /// Runs one call, waits for its decision to reach the audit log, prints
    /// its block and checks it with `expect`.
    async fn step(
        &self,
        call: &str,
        action: &str,
        run: impl Future<Output = anyhow::Result<Answer>>,
        expect: impl FnOnce(&Observed) -> Vec<String>,
    ) -> anyhow::Result<Observed> {
        let before = Scrape::take(&self.http, &self.sidecar.admin).await?;
        let inbox_before = self.inbox.len();
        let (audit_before, _) = self.audit_count(action).await?;

        let started = Instant::now();
        let answer = run.await?;
        let wall = started.elapsed();

        // The sidecar reports in batches (every 100 ms here).
        let deadline = Instant::now() + Duration::from_secs(10);
        let log = loop {
            let (n, log) = self.audit_count(action).await?;
            if n > audit_before {
                break log;
            }
            if Instant::now() > deadline {
                bail!("the decision on {action} did not reach the audit log within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let after = Scrape::take(&self.http, &self.sidecar.admin).await?;
        let (counted, took) = after.since(&before);
        let observed = Observed {
            answer,
            received: self.inbox.since(inbox_before),
            audit: report::newest(&log, action).cloned().unwrap_or(Value::Null),
            counted,
        };

        let audit = &observed.audit;
        let mut decision = audit["decision"].as_str().unwrap_or("?").to_owned();
        if let Some(would) = audit["would_decide"].as_str() {
            decision = format!("{decision} (monitor; would {would})");
        }
        if let Some(hitl) = audit["hitl_result"].as_str() {
            decision = format!("{decision} → {hitl}");
        }
        if wall > Duration::from_millis(500) {
            let held = report::duration(wall.as_secs_f64());
            decision = format!("{decision} (held {held})");
        }
        if observed.counted.iter().any(|d| d == "redact") {
            decision.push_str("; result: redact");
        }
        let row = Row {
            call: report::clip(call, 34),
            decision,
            rule: audit["rule_code"].as_str().unwrap_or("-").to_owned(),
            took: report::duration(took),
            upstream: report::received(&observed.received),
            agent_saw: report::answer(&observed.answer),
        };
        let failures = expect(&observed);
        self.calls.set(self.calls.get() + 1);
        report::print(self.calls.get(), &row, &failures);
        if !failures.is_empty() {
            self.failed.set(self.failed.get() + 1);
        }
        Ok(observed)
    }

    async fn set_mode(&self, agent_row: &str, mode: &str) -> anyhow::Result<()> {
        self.plane
            .expect(
                Method::PUT,
                &format!("/allow/agents/{agent_row}"),
                Some(json!({"mode": mode})),
                200,
            )
            .await?;
        // The sidecar hears it on its mode stream, not on its next pull.
        self.sidecar.wait_for_mode(&self.http, mode).await
    }
}

/// Collects the expectations a call missed.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn that(mut self, ok: bool, what: &str) -> Checks {
        if !ok {
            self.0.push(what.to_owned());
        }
        self
    }
}

fn decided(o: &Observed, decision: &str) -> bool {
    o.audit["decision"] == decision
}

fn reached(o: &Observed, tool: &str) -> bool {
    o.received.len() == 1 && o.received[0].what == tool
}

fn ok_text(o: &Observed) -> String {
    match &o.answer {
        Answer::Ok(v) => v.to_string(),
        Answer::Refused { .. } => String::new(),
    }
}

fn refused_with(o: &Observed, code: i64) -> bool {
    matches!(&o.answer, Answer::Refused { body, .. } if body["code"] == code)
}

async fn tour(
    cli: &Cli,
    stop: tokio::sync::watch::Receiver<bool>,
    servers: &mut stack::Servers,
) -> anyhow::Result<bool> {
    let data_dir = stack::data_dir(cli.data_dir.clone())?;
    println!("Warden quickstart\n");
    println!("1. Control plane (SQLite in {})", data_dir.display());
    let plane = Plane::start(&data_dir, stop.clone(), servers).await?;
    println!("   listening on {}", plane.base);

    let agent = plane
        .expect(
            Method::POST,
            "/allow/agents",
            Some(json!({"agent_id": AGENT, "name": "Support bot", "mode": "enforce"})),
            201,
        )
        .await?;
    let agent_row = agent["id"].as_str().unwrap_or_default().to_owned();
    let agent_key = agent["api_key"].as_str().unwrap_or_default().to_owned();
    println!("   agent {AGENT} created in enforce mode; its key goes to the sidecar");

    println!("\n2. Rules, through POST /rules");
    let no_drops = plane
        .rule(
            json!({"name": "never drop databases", "operations": ["action"], "priority": 100}),
            NO_DROPS,
        )
        .await?;
    println!("   {no_drops}  never drop databases (action: deny)");
    let mut codes = Vec::new();
    for pack in &PACKS {
        let meta: Value = serde_json::from_str(pack.meta)
            .with_context(|| format!("examples/rules/{}/rule.json", pack.dir))?;
        let code = plane.rule(meta.clone(), pack.rego).await?;
        println!(
            "   {code}  {} (examples/rules/{})",
            meta["name"].as_str().unwrap_or_default(),
            pack.dir
        );
        codes.push(code);
    }
    let [approval_rule, pii_rule, _] =
        <[String; 3]>::try_from(codes).map_err(|_| anyhow::anyhow!("three rule packs"))?;

    println!("\n3. Tools and sidecar");
    let inbox = Inbox::default();
    let (crm_addr, billing_addr) = demo::start(inbox.clone()).await?;
    let sidecar = Sidecar::start(
        &plane,
        &agent_key,
        &format!("http://{crm_addr}/mcp"),
        &format!("http://{billing_addr}"),
        stop,
        servers,
    )
    .await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    sidecar.wait_for_mode(&http, "enforce").await?;
    println!(
        "   MCP server  {crm_addr}  behind the sidecar at {}",
        sidecar.crm
    );
    println!(
        "   HTTP API    {billing_addr}  behind the sidecar at {}",
        sidecar.billing
    );
    println!("   sidecar configuration:");
    for line in sidecar.yaml.lines() {
        println!("     {line}");
    }

    println!(
        "\n4. The agent's calls (the agent knows nothing of Warden; it calls the sidecar's URLs)"
    );
    let mut mcp = McpSession::open(http.clone(), sidecar.crm.clone()).await?;
    let t = Tour {
        plane,
        sidecar,
        inbox,
        http,
        calls: Cell::new(0),
        failed: Cell::new(0),
    };
    report::header();

    let args = json!({"query": "refund policy"});
    let run = mcp.call_tool("search_docs", args);
    t.step("crm: search_docs", "search_docs", run, |o| {
        Checks::default()
            .that(decided(o, "permit"), "permitted")
            .that(reached(o, "search_docs"), "reached the tool")
            .that(ok_text(o).contains("Refunds"), "the agent got the result")
            .0
    })
    .await?;

    let run = mcp.call_tool("drop_database", json!({"name": "prod"}));
    t.step("crm: drop_database", "drop_database", run, |o| {
        Checks::default()
            .that(decided(o, "deny"), "denied")
            .that(
                o.audit["rule_code"] == no_drops.as_str(),
                "by the no-drops rule",
            )
            .that(o.received.is_empty(), "never reached the tool")
            .that(
                refused_with(o, -32050),
                "answered with JSON-RPC error -32050",
            )
            .0
    })
    .await?;

    let args = json!({"to": "ana@example.com", "body": "Your refund is on its way."});
    let run = mcp.call_tool("send_email", args);
    t.step("crm: send_email", "send_email", run, |o| {
        let to = o.received.first().map(|r| r.arguments["to"].to_string());
        let to = to.unwrap_or_default();
        Checks::default()
            .that(decided(o, "mask"), "masked")
            .that(o.audit["rule_code"] == pii_rule.as_str(), "by the PII pack")
            .that(reached(o, "send_email"), "reached the tool")
            .that(!to.contains("ana@"), "the tool got the address masked")
            .that(to.contains("@example.com"), "the address kept its domain")
            .0
    })
    .await?;

    let run = mcp.call_tool("lookup_customer", json!({"id": "42"}));
    t.step("crm: lookup_customer", "lookup_customer", run, |o| {
        let text = ok_text(o);
        Checks::default()
            .that(decided(o, "permit"), "permitted")
            .that(reached(o, "lookup_customer"), "reached the tool")
            .that(text.contains("Ana Lima"), "the agent got the record")
            .that(!text.contains(CUSTOMER_API_KEY), "without the API key")
            .that(
                o.counted.iter().any(|d| d == "redact"),
                "the result was redacted",
            )
            .0
    })
    .await?;

    // The call is held until a human answers; here the quickstart answers
    // through the approvals API, as a reviewer's tool would.
    let url = format!("{}/v1/customers/42", t.sidecar.billing);
    let run = approve_while_held(&t.plane, &t.http, url);
    t.step(
        "billing: DELETE /v1/customers/42",
        "delete_customer",
        run,
        |o| {
            Checks::default()
                .that(decided(o, "approval_required"), "held for approval")
                .that(
                    o.audit["rule_code"] == approval_rule.as_str(),
                    "by the approvals pack",
                )
                .that(
                    o.audit["hitl_result"] == "approved",
                    "approved through the API",
                )
                .that(
                    reached(o, "DELETE /v1/customers/42"),
                    "forwarded once approved",
                )
                .0
        },
    )
    .await?;

    println!(
        "\n   The agent goes to monitor mode (PUT /allow/agents/:id): decisions are recorded, not enforced."
    );
    t.set_mode(&agent_row, "monitor").await?;
    let run = mcp.call_tool("drop_database", json!({"name": "staging"}));
    t.step("crm: drop_database (monitor)", "drop_database", run, |o| {
        Checks::default()
            .that(decided(o, "permit"), "permitted in monitor mode")
            .that(
                o.audit["would_decide"] == "deny",
                "recorded what enforce would do",
            )
            .that(reached(o, "drop_database"), "reached the tool")
            .0
    })
    .await?;
    t.set_mode(&agent_row, "enforce").await?;
    println!("\n   Back to enforce.");

    let (calls, failed) = (t.calls.get(), t.failed.get());
    let ok = failed == 0;
    if ok {
        println!("\nEvery call behaved as shown ({calls} calls).");
    } else {
        println!("\n{failed} of {calls} calls did not behave as shown.");
    }
    println!("\nWhere to look next:");
    println!(
        "  the audit log:   curl -s -H \"Authorization: Bearer $WARDEN_KEY\" '{}/v1/allow/audit-log?agent_id={AGENT}'",
        t.plane.base
    );
    println!("  the API:         {}/openapi.json", t.plane.base);
    println!("  sidecar metrics: {}/metrics", t.sidecar.admin);
    println!("  the rule packs:  examples/rules/, sidecar configs in examples/sidecar/");
    if cli.keep_running {
        println!("\nThe servers keep running; Ctrl-C stops them.");
        println!(
            "  WARDEN_KEY={}  (a test key of this throwaway organization)",
            t.plane.admin_key
        );
        println!("  point an MCP client at {}", t.sidecar.crm);
    } else {
        println!("\nRun with --keep-running to keep the servers up and try your own calls.");
    }
    if cli.data_dir.is_none() && !cli.keep_running {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    Ok(ok)
}

/// Sends the DELETE through the sidecar, approves the queue item it opens,
/// and returns what the agent finally got.
async fn approve_while_held(
    plane: &Plane,
    http: &reqwest::Client,
    url: String,
) -> anyhow::Result<Answer> {
    let call = {
        let http = http.clone();
        tokio::spawn(async move { http_call(&http, Method::DELETE, &url).await })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let item = loop {
        let queue = plane
            .expect(Method::GET, "/allow/hitl/queue", None, 200)
            .await?;
        // The queue also holds coverage-gap items (for rule authors); the
        // held call is the pending end-user approval.
        let held = queue["data"].as_array().and_then(|items| {
            items
                .iter()
                .find(|i| i["category"] == "enduser" && i["status"] == "pending")
        });
        if let Some(id) = held.and_then(|i| i["id"].as_str()) {
            break id.to_owned();
        }
        if Instant::now() > deadline {
            bail!("no approval item appeared within 15 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    plane
        .expect(
            Method::POST,
            &format!("/allow/hitl/queue/{item}"),
            Some(json!({"decision": "approved"})),
            200,
        )
        .await?;
    call.await.context("the held call")?
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warden's own logs go to stderr, warnings only, so the tour stays readable.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("warden-quickstart: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut servers = stack::Servers::new();
        let result = tour(&cli, stop, &mut servers).await;
        if matches!(result, Ok(true)) && cli.keep_running {
            let _ = tokio::signal::ctrl_c().await;
        }
        stop_tx.send_replace(true);
        // The sidecar flushes its telemetry and both servers finish their
        // requests; bounded, so that a stuck one cannot hold the exit.
        let drained = tokio::time::timeout(Duration::from_secs(15), async {
            while let Some(done) = servers.join_next().await {
                if let Ok(Err(e)) = done {
                    eprintln!("warden-quickstart: a server stopped with an error: {e:#}");
                }
            }
        })
        .await;
        if drained.is_err() {
            eprintln!("warden-quickstart: the servers did not stop within 15 s");
        }
        match result {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("\nwarden-quickstart: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}
