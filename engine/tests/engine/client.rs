//! The client fail-closed state machine (spec §9), driven with real bundle JSON.

use super::fixtures::bundle_rule;
use chrono::Utc;
use serde_json::{Value, json};
use warden_engine::bundle::{self, BundleError, BundleSource};
use warden_engine::client::{ClientState, MaskOutcome, mask_or_block};
use warden_engine::model::{
    ActionInput, AgentAttributes, AgentMode, BundleRule, Decision, Facet, ModeByOperation,
    NoCoverageSettings, ReasonCode, RetrievalInput,
};

fn rule(rego: &str) -> BundleRule {
    bundle_rule(7, "R-0001", vec![Facet::Action], rego)
}

const MASK_RULE: &str = "package m\ndecision := \"mask\" if input.action == \"send_email\"\nredactions := [{\"field\": \"to\", \"mode\": \"email\"}]";
const DENY_RULE: &str = "package d\ndecision := \"deny\" if input.action == \"delete_repo\"";

fn bundle_json(mode: AgentMode, rules: &[BundleRule]) -> Value {
    let attrs = AgentAttributes::default();
    let settings = NoCoverageSettings::default();
    let b = bundle::unified(&BundleSource {
        agent_id: "agent-1",
        agent_mode: mode,
        mode_by_operation: &ModeByOperation::new(),
        attributes: &attrs,
        cognition_capture: false,
        rules,
        no_coverage: &settings,
    });
    serde_json::to_value(b).unwrap()
}

/// Edits a bundle's JSON and re-signs its version, as a newer server would.
fn edited(mut v: Value, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    edit(&mut v);
    v["version"] = json!(bundle::version_of(&v));
    serde_json::to_vec(&v).unwrap()
}

fn action(name: &str) -> ActionInput {
    ActionInput {
        agent_id: "agent-1".into(),
        target_app: "app".into(),
        action: name.into(),
        context: json!({"to": "jane@example.com"}),
    }
}

fn retrieval() -> RetrievalInput {
    RetrievalInput {
        agent_id: "agent-1".into(),
        operation: Default::default(),
        resource_type: "document".into(),
        resource_metadata: json!({}),
        query: None,
        surface: None,
        trust_tier: None,
    }
}

#[test]
fn never_confirmed_without_a_bundle_runs_as_monitor() {
    let c = ClientState::new();
    let a = c.decide_action(&action("delete_repo"));
    assert_eq!(
        (a.decision, a.enforced, a.agent_mode),
        (Decision::Permit, false, AgentMode::Monitor)
    );
    let r = c.decide_retrieval(&retrieval(), Utc::now());
    assert_eq!((r.decision, r.enforced), (Decision::Allow, false));
}

#[test]
fn confirmed_enforce_that_loses_its_bundle_denies_everything() {
    let mut c = ClientState::new();
    let json = serde_json::to_vec(&bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)])).unwrap();
    c.install(&json).unwrap();
    assert_eq!(c.decide_action(&action("get_x")).decision, Decision::Permit);
    assert_eq!(
        c.decide_action(&action("delete_repo")).decision,
        Decision::Deny
    );
    c.lose_bundle();
    let a = c.decide_action(&action("get_x"));
    assert_eq!((a.decision, a.enforced), (Decision::Deny, true));
    let r = c.decide_retrieval(&retrieval(), Utc::now());
    assert_eq!(
        (r.decision, r.reason_code),
        (Decision::Deny, Some(ReasonCode::DefaultDeny))
    );
}

#[test]
fn confirmed_monitor_or_off_stays_permissive_without_a_bundle() {
    for mode in [AgentMode::Monitor, AgentMode::Off] {
        let mut c = ClientState::new();
        c.set_mode(mode);
        assert_eq!(
            c.decide_action(&action("delete_repo")).decision,
            Decision::Permit,
            "{mode}"
        );
        assert_eq!(
            c.decide_retrieval(&retrieval(), Utc::now()).decision,
            Decision::Allow
        );
    }
}

#[test]
fn a_too_new_bundle_is_refused_and_fails_closed_when_enforcing() {
    let mut c = ClientState::new();
    let json = edited(bundle_json(AgentMode::Enforce, &[]), |v| {
        v["min_dialect"] = json!(99)
    });
    assert!(matches!(
        c.install(&json),
        Err(BundleError::TooNew { min_dialect: 99 })
    ));
    assert_eq!(c.confirmed_mode(), Some(AgentMode::Enforce));
    assert_eq!(c.decide_action(&action("get_x")).decision, Decision::Deny);
}

#[test]
fn unknown_constructs_are_must_understand() {
    let base = bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)]);
    let unknown_facet = edited(base.clone(), |v| {
        v["rules"][0]["applies_to"] = json!(["teleport"])
    });
    let unknown_effect = edited(base.clone(), |v| {
        v["rules"][0]["effect"] = json!("quarantine")
    });
    let unknown_verb = edited(base.clone(), |v| {
        v["rules"][0]["rego_source"] = json!("package q\ndecision := \"quarantine\" if true")
    });
    for json in [unknown_facet, unknown_effect, unknown_verb] {
        let mut c = ClientState::new();
        assert!(c.install(&json).is_err());
        assert!(c.refusal().is_some());
        assert_eq!(c.decide_action(&action("get_x")).decision, Decision::Deny);
    }
    // An unknown field is not a construct: it is ignored.
    let extra = edited(base, |v| v["future_field"] = json!({"anything": 1}));
    let mut c = ClientState::new();
    c.install(&extra).unwrap();
    assert_eq!(c.decide_action(&action("get_x")).decision, Decision::Permit);
}

#[test]
fn a_refused_monitor_bundle_stays_permissive() {
    let mut c = ClientState::new();
    let json = edited(bundle_json(AgentMode::Monitor, &[]), |v| {
        v["min_dialect"] = json!(2)
    });
    assert!(c.install(&json).is_err());
    assert_eq!(
        c.decide_action(&action("delete_repo")).decision,
        Decision::Permit
    );
}

#[test]
fn a_tampered_bundle_is_refused() {
    let mut v = bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)]);
    v["rules"][0]["priority"] = json!(100);
    let mut c = ClientState::new();
    assert!(matches!(
        c.install(&serde_json::to_vec(&v).unwrap()),
        Err(BundleError::VersionMismatch { .. })
    ));
}

#[test]
fn a_mode_change_applies_at_once() {
    let mut c = ClientState::new();
    c.install(&serde_json::to_vec(&bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)])).unwrap())
        .unwrap();
    c.set_mode(AgentMode::Monitor);
    let v = c.decide_action(&action("delete_repo"));
    assert_eq!(
        (v.decision, v.would_decide),
        (Decision::Permit, Some(Decision::Deny))
    );
    c.set_mode(AgentMode::Enforce);
    assert_eq!(
        c.decide_action(&action("delete_repo")).decision,
        Decision::Deny
    );
}

#[test]
fn the_terminal_bundle_denies_everything() {
    let mut c = ClientState::new();
    c.install(&serde_json::to_vec(&bundle::terminal("agent-1")).unwrap())
        .unwrap();
    for name in ["get_x", "update_x", "delete_x", "grant_x"] {
        let v = c.decide_action(&action(name));
        assert_eq!(v.decision, Decision::Deny, "{name}");
        assert!(v.rule_code.unwrap().ends_with("-DENY"));
    }
    assert_eq!(
        c.decide_retrieval(&retrieval(), Utc::now()).decision,
        Decision::Deny
    );
}

#[test]
fn masking_that_cannot_apply_blocks() {
    let mut c = ClientState::new();
    c.install(&serde_json::to_vec(&bundle_json(AgentMode::Enforce, &[rule(MASK_RULE)])).unwrap())
        .unwrap();
    let v = c.decide_action(&action("send_email"));
    assert_eq!(v.decision, Decision::Mask);
    let mut args = json!({"to": "jane@example.com"});
    assert_eq!(mask_or_block(&v, &mut args), MaskOutcome::Masked(1));
    assert_eq!(args, json!({"to": "j***@example.com"}));

    // Too deep to walk: blocked, and the value is left as it was, never half-masked.
    let mut deep = json!("x");
    for _ in 0..100 {
        deep = json!({ "to": deep });
    }
    let before = deep.clone();
    assert!(matches!(
        mask_or_block(&v, &mut deep),
        MaskOutcome::Blocked(_)
    ));
    assert_eq!(deep, before);

    // A verdict with nothing to apply blocks too.
    let permit = c.decide_action(&action("get_x"));
    assert!(matches!(
        mask_or_block(&permit, &mut json!({})),
        MaskOutcome::Blocked(_)
    ));
}

#[test]
fn unchanged_rules_are_not_recompiled_on_refresh() {
    let mut c = ClientState::new();
    let first = bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)]);
    c.install(&serde_json::to_vec(&first).unwrap()).unwrap();
    let before = c.policy().unwrap().rules()[0].clone();
    let second = edited(first, |v| {
        v["agent_attributes"]["categories"] = json!(["finance"])
    });
    c.install(&second).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &before,
        &c.policy().unwrap().rules()[0]
    ));
}

/// A payload the sidecar cannot read is denied when enforcing and only
/// observed in monitor mode: never forwarded as if judged.
#[test]
fn unjudgeable_calls_fail_closed_when_enforcing() {
    let mut c = ClientState::new();
    let json = serde_json::to_vec(&bundle_json(AgentMode::Enforce, &[])).unwrap();
    c.install(&json).unwrap();
    let v = c.decide_unjudgeable(Facet::Action, "body over 1048576 bytes");
    assert_eq!((v.decision, v.enforced), (Decision::Deny, true));
    assert!(v.reason.contains("body over"), "{}", v.reason);
    c.set_mode(AgentMode::Monitor);
    let v = c.decide_unjudgeable(Facet::Action, "body is not JSON");
    assert_eq!(
        (v.decision, v.enforced, v.would_decide),
        (Decision::Permit, false, Some(Decision::Deny))
    );
}

/// `prepare` then `apply` is `install`, split so that compiling happens
/// under a shared borrow.
#[test]
fn a_prepared_bundle_installs_like_install() {
    let mut c = ClientState::new();
    let json = serde_json::to_vec(&bundle_json(AgentMode::Enforce, &[rule(DENY_RULE)])).unwrap();
    let prepared = c.prepare(&json);
    assert_eq!(c.bundle_version(), None, "nothing changes before apply");
    c.apply(prepared).unwrap();
    assert_eq!(
        c.decide_action(&action("delete_repo")).decision,
        Decision::Deny
    );
    assert!(c.apply(c.prepare(b"{")).is_err());
    assert_eq!(c.bundle_version(), None, "a refused bundle is not run");
}
