//! Data-driven decision cases: every file under `tests/cases/` is a YAML list of
//! cases run through one `check()`. Adding a case needs no Rust.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::fixtures::{bundle_rule, epoch};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde::Deserialize;
use serde_json::Value;
use warden_engine::model::{
    ActionInput, AgentAttributes, AgentMode, BundleRule, Bypass, DelegationContext,
    DelegationInput, Facet, ModeByOperation, NoCoverageSettings, RetrievalInput,
    RetrievalOperation,
};
use warden_engine::{AgentContext, CompiledRule, Policy, PolicySet, UnifiedVerdict, Verdict};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    note: String,
    #[serde(default)]
    rules: Vec<CaseRule>,
    #[serde(default)]
    agent: CaseAgent,
    #[serde(default)]
    settings: Option<NoCoverageSettings>,
    #[serde(default)]
    input: Option<CaseInput>,
    #[serde(default)]
    want: Option<Want>,
    /// The first rule must fail to compile with this error.
    #[serde(default)]
    compile_error: Option<WantCompileError>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseRule {
    code: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    priority: i64,
    #[serde(default = "action_only")]
    applies_to: Vec<Facet>,
    #[serde(default)]
    target_app: Option<String>,
    #[serde(default)]
    action_pattern: Option<String>,
    #[serde(default)]
    trust_tier: Option<String>,
    #[serde(default)]
    surface: Option<String>,
    #[serde(default)]
    principal_exclusions: Option<Vec<String>>,
    #[serde(default)]
    bypass_active: bool,
    /// Seconds from the evaluation time at which the bypass lapses (negative: already lapsed).
    #[serde(default)]
    bypass_expires_in: Option<i64>,
    /// Creation order tie-break: seconds after a fixed epoch (default: position).
    #[serde(default)]
    created_offset: Option<i64>,
    rego: String,
}

fn action_only() -> Vec<Facet> {
    vec![Facet::Action]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseAgent {
    #[serde(default = "default_agent_id")]
    agent_id: String,
    #[serde(default = "enforce")]
    mode: AgentMode,
    #[serde(default)]
    mode_by_operation: ModeByOperation,
    #[serde(default)]
    attributes: AgentAttributes,
}

impl Default for CaseAgent {
    fn default() -> Self {
        CaseAgent {
            agent_id: default_agent_id(),
            mode: AgentMode::Enforce,
            mode_by_operation: ModeByOperation::new(),
            attributes: AgentAttributes::default(),
        }
    }
}

fn default_agent_id() -> String {
    "agent-1".to_owned()
}

fn enforce() -> AgentMode {
    AgentMode::Enforce
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseInput {
    /// Several facets: a unified `POST /evaluate`.
    #[serde(default)]
    operations: Option<Vec<Facet>>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    target_app: Option<String>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    operation: Option<RetrievalOperation>,
    #[serde(default)]
    resource_type: Option<String>,
    #[serde(default)]
    resource_metadata: Option<Value>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    surface: Option<String>,
    #[serde(default)]
    trust_tier: Option<String>,
    #[serde(default)]
    delegation: Option<DelegationContext>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Want {
    decision: String,
    #[serde(default)]
    would_decide: Option<String>,
    #[serde(default)]
    enforced: Option<bool>,
    #[serde(default)]
    evaluated: Option<bool>,
    #[serde(default)]
    reason_code: Option<String>,
    /// `null` asserts no rule code.
    #[serde(default, deserialize_with = "some")]
    rule_code: Option<Option<String>>,
    #[serde(default)]
    reason_contains: Option<String>,
    #[serde(default)]
    hitl_fallback: Option<String>,
    /// The context (action) or resource metadata (retrieval) after applying the directives.
    #[serde(default)]
    masked: Option<Value>,
    #[serde(default)]
    has_redactions: Option<bool>,
    /// Per-facet results of a unified evaluation, in request order.
    #[serde(default)]
    results: Option<Vec<Want>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WantCompileError {
    line: u32,
    #[serde(default)]
    column: Option<u32>,
    message_contains: String,
}

fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap()
}

fn case_rule(i: usize, r: &CaseRule) -> BundleRule {
    BundleRule {
        name: r.name.clone().unwrap_or_else(|| format!("rule {}", r.code)),
        priority: r.priority,
        created_at: epoch() + Duration::seconds(r.created_offset.unwrap_or(i as i64)),
        target_app: r.target_app.clone(),
        action_pattern: r.action_pattern.clone(),
        trust_tier: r.trust_tier.clone(),
        surface: r.surface.clone(),
        principal_exclusions: r.principal_exclusions.clone(),
        bypass: Bypass {
            bypass_active: r.bypass_active,
            bypass_expires_at: r.bypass_expires_in.map(|s| now() + Duration::seconds(s)),
            ..Bypass::default()
        },
        ..bundle_rule(i as u128 + 1, &r.code, r.applies_to.clone(), &r.rego)
    }
}

/// Runs one case; returns a description of the first mismatch.
fn check(case: &Case) -> Result<(), String> {
    if let Some(want) = &case.compile_error {
        let r = case
            .rules
            .first()
            .ok_or("compile_error case without a rule")?;
        return match Policy::compile(&r.rego, &r.applies_to) {
            Ok(_) => Err("compiled, but an error was expected".into()),
            Err(e) => {
                let column_ok = want.column.is_none_or(|c| c == e.column);
                if e.line == want.line && column_ok && e.message.contains(&want.message_contains) {
                    Ok(())
                } else {
                    Err(format!("got error {e:?}"))
                }
            }
        };
    }
    let mut compiled = Vec::new();
    for (i, r) in case.rules.iter().enumerate() {
        let rule =
            CompiledRule::compile(&case_rule(i, r)).map_err(|e| format!("{}: {e}", r.code))?;
        compiled.push(Arc::new(rule));
    }
    let set = PolicySet::new(
        compiled,
        AgentContext {
            agent_id: case.agent.agent_id.clone(),
            mode: case.agent.mode,
            mode_by_operation: case.agent.mode_by_operation.clone(),
            attributes: case.agent.attributes.clone(),
        },
        case.settings.clone().unwrap_or_default(),
    );
    let input = case.input.as_ref().ok_or("case without input")?;
    let want = case.want.as_ref().ok_or("case without want")?;
    let agent_id = case.agent.agent_id.clone();
    let action = || ActionInput {
        agent_id: agent_id.clone(),
        target_app: input.target_app.clone().unwrap_or_default(),
        action: input.action.clone().unwrap_or_default(),
        context: input
            .context
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default())),
    };
    let retrieval = || RetrievalInput {
        agent_id: agent_id.clone(),
        operation: input.operation.unwrap_or_default(),
        resource_type: input
            .resource_type
            .clone()
            .unwrap_or_else(|| "document".into()),
        resource_metadata: input
            .resource_metadata
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default())),
        query: input.query.clone(),
        surface: input.surface.clone(),
        trust_tier: input.trust_tier.clone(),
    };
    let delegation = || DelegationInput {
        agent_id: agent_id.clone(),
        target_app: input.target_app.clone().unwrap_or_default(),
        context: input.delegation.clone().unwrap_or_default(),
    };
    let decide = |facet: Facet| match facet {
        Facet::Action => set.decide_action(&action()),
        Facet::Retrieval => set.decide_retrieval(&retrieval(), now()),
        Facet::Delegation => set.decide_delegation(&delegation()),
    };
    let facets = match (&input.operations, &input.delegation, &input.action) {
        (Some(ops), _, _) => ops.clone(),
        (None, Some(_), _) => vec![Facet::Delegation],
        (None, None, Some(_)) => vec![Facet::Action],
        (None, None, None) => vec![Facet::Retrieval],
    };
    if input.operations.is_some() {
        let unified = UnifiedVerdict::combine(facets.iter().map(|f| decide(*f)).collect());
        expect(&want.decision, unified.decision.as_str(), "union decision")?;
        let wants = want
            .results
            .as_ref()
            .ok_or("unified case without results")?;
        if wants.len() != unified.results.len() {
            return Err(format!(
                "{} results, want {}",
                unified.results.len(),
                wants.len()
            ));
        }
        for (w, v) in wants.iter().zip(&unified.results) {
            compare(w, v, &action(), &retrieval())?;
        }
        return Ok(());
    }
    compare(want, &decide(facets[0]), &action(), &retrieval())
}

fn expect(want: &str, got: &str, what: &str) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, want {want}"))
    }
}

fn compare(
    w: &Want,
    v: &Verdict,
    action: &ActionInput,
    retrieval: &RetrievalInput,
) -> Result<(), String> {
    let ctx = || format!("verdict {v:?}");
    expect(&w.decision, v.decision.as_str(), "decision").map_err(|e| format!("{e}; {}", ctx()))?;
    if let Some(wd) = &w.would_decide {
        expect(
            wd,
            v.would_decide.map_or("none", |d| d.as_str()),
            "would_decide",
        )?;
    }
    if let Some(e) = w.enforced {
        expect(&e.to_string(), &v.enforced.to_string(), "enforced")?;
    }
    if let Some(e) = w.evaluated {
        expect(&e.to_string(), &v.evaluated.to_string(), "evaluated")?;
    }
    if let Some(rc) = &w.reason_code {
        expect(
            rc,
            v.reason_code.map_or("none", |c| c.as_str()),
            "reason_code",
        )?;
    }
    if let Some(code) = &w.rule_code {
        expect(
            code.as_deref().unwrap_or("none"),
            v.rule_code.as_deref().unwrap_or("none"),
            "rule_code",
        )?;
    }
    if let Some(s) = &w.reason_contains
        && !v.reason.contains(s.as_str())
    {
        return Err(format!("reason {:?} does not contain {s:?}", v.reason));
    }
    if let Some(f) = &w.hitl_fallback {
        let got = v.hitl_fallback.map_or("none".to_owned(), |h| {
            serde_json::to_value(h)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        });
        expect(f, &got, "hitl_fallback")?;
    }
    if let Some(h) = w.has_redactions {
        expect(
            &h.to_string(),
            &v.redactions.is_some().to_string(),
            "has_redactions",
        )?;
    }
    if let Some(want_masked) = &w.masked {
        let mut value = match v.facet {
            Facet::Retrieval => retrieval.resource_metadata.clone(),
            _ => action.context.clone(),
        };
        match warden_engine::client::mask_or_block(v, &mut value) {
            warden_engine::client::MaskOutcome::Masked(_) if &value == want_masked => {}
            other => {
                return Err(format!(
                    "masking gave {other:?} -> {value}, want {want_masked}"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_case_file_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no case files in {}", dir.display());
    let mut failures = BTreeMap::new();
    let mut count = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let cases: Vec<Case> =
            yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for case in &cases {
            count += 1;
            if let Err(e) = check(case) {
                failures.insert(
                    format!(
                        "{} :: {}",
                        file.file_name().unwrap().to_string_lossy(),
                        case.note
                    ),
                    e,
                );
            }
        }
    }
    assert!(count > 0);
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{failures:#?}",
        failures.len()
    );
}
