//! What the quickstart prints: one block per call, and the sidecar's own
//! account of it read from its `/metrics` (which decisions it counted, and
//! how long it spent deciding).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::agent::Answer;
use crate::demo::Received;

/// One governed call, as observed from every side.
#[derive(Debug, Default)]
pub(crate) struct Row {
    pub(crate) call: String,
    pub(crate) decision: String,
    pub(crate) rule: String,
    pub(crate) took: String,
    pub(crate) upstream: String,
    pub(crate) agent_saw: String,
}

/// The column heads, printed once.
pub(crate) fn header() {
    println!(
        "\n {:>2}  {:34}  {:44}  {:13}  decided in",
        "#", "call", "decision", "rule"
    );
    println!(" {}", "-".repeat(110));
}

/// One call's block; `failures` are the expectations it missed.
pub(crate) fn print(n: usize, row: &Row, failures: &[String]) {
    let mark = if failures.is_empty() { " " } else { "✗" };
    println!(
        "{mark}{n:>2}  {:34}  {:44}  {:13}  {}",
        row.call, row.decision, row.rule, row.took
    );
    println!("      upstream received  {}", row.upstream);
    println!("      agent saw          {}", row.agent_saw);
    for f in failures {
        println!("      ✗ {f}");
    }
}

/// Shortens `text` to `max` characters for a table cell.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// What reached the tools.
pub(crate) fn received(calls: &[Received]) -> String {
    if calls.is_empty() {
        return "nothing: the call never reached the tool".to_owned();
    }
    let shown: Vec<String> = calls
        .iter()
        .map(|c| {
            if c.arguments.as_object().is_some_and(|o| o.is_empty()) {
                c.what.clone()
            } else {
                format!("{} {}", c.what, c.arguments)
            }
        })
        .collect();
    clip(&shown.join("; "), 90)
}

/// What the agent got back.
pub(crate) fn answer(a: &Answer) -> String {
    match a {
        Answer::Ok(v) => {
            let text = v["content"][0]["text"]
                .as_str()
                .map_or_else(|| v.to_string(), |t| format!("{t:?}"));
            clip(&text, 90)
        }
        Answer::Refused { status, body } => {
            let code = body["code"].clone();
            let why = body["data"]["reason"]
                .as_str()
                .or_else(|| body["reason"].as_str())
                .or_else(|| body["message"].as_str())
                .unwrap_or_default();
            if *status == 200 {
                clip(&format!("JSON-RPC error {code}: {why}"), 90)
            } else {
                clip(&format!("HTTP {status} {code}: {why}"), 90)
            }
        }
    }
}

/// The sidecar's counters at one moment.
#[derive(Debug, Default)]
pub(crate) struct Scrape {
    /// `decision` label (with `enforced`) → count.
    decisions: BTreeMap<String, f64>,
    /// Seconds spent deciding, summed over every call.
    added: f64,
}

impl Scrape {
    pub(crate) async fn take(http: &reqwest::Client, admin: &str) -> anyhow::Result<Scrape> {
        let text = http
            .get(format!("{admin}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let mut s = Scrape::default();
        for line in text.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            if name == "warden_proxy_added_latency_seconds_sum" {
                s.added = value;
            } else if let Some(labels) = name.strip_prefix("warden_proxy_decisions_total{") {
                let label = |key: &str| {
                    labels
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                        .map(|v| v.trim_end_matches(['"', '}']).to_owned())
                        .unwrap_or_default()
                };
                let mut key = label("decision");
                if label("enforced") == "false" {
                    key.push_str(" (not enforced)");
                }
                *s.decisions.entry(key).or_default() += value;
            }
        }
        Ok(s)
    }

    /// The decisions counted since `before`, and the time spent deciding.
    pub(crate) fn since(&self, before: &Scrape) -> (Vec<String>, f64) {
        let grew = self
            .decisions
            .iter()
            .filter(|(k, v)| **v > before.decisions.get(*k).copied().unwrap_or(0.0))
            .map(|(k, _)| k.clone())
            .collect();
        (grew, self.added - before.added)
    }
}

/// Seconds as a short human duration.
pub(crate) fn duration(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.1} s")
    } else if secs >= 0.001 {
        format!("{:.1} ms", secs * 1e3)
    } else {
        format!("{:.0} µs", secs * 1e6)
    }
}

/// The newest audit-log entry for `action`.
pub(crate) fn newest<'a>(log: &'a Value, action: &str) -> Option<&'a Value> {
    log["data"]
        .as_array()?
        .iter()
        .find(|e| e["action"] == action)
}
