//! Differential test: for generated rules inside the native subset and generated
//! inputs, the native path and regorus (the reference) decide the same.

use std::sync::Arc;

use super::fixtures::{agent, bundle_rule};
use proptest::prelude::*;
use serde_json::{Value, json};
use warden_engine::model::{ActionInput, AgentAttributes, Decision, Facet, NoCoverageSettings};
use warden_engine::{CompiledRule, PolicySet, Strategy as Compile, Verdict};

const FIELDS: &[&str] = &["a", "b", "c"];

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"prod\"".to_owned()),
        Just("\"dev\"".to_owned()),
        Just("\"p\"".to_owned()),
        Just("\"\"".to_owned()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("5".to_owned()),
        Just("2.5".to_owned()),
        Just("-3".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("null".to_owned()),
        Just("[1, \"p\"]".to_owned()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(FIELDS).prop_map(|f| format!("input.context.{f}")),
        1 => Just("input.action".to_owned()),
        1 => Just("input.context.items".to_owned()),
        1 => Just("input.context.items[0]".to_owned()),
        1 => Just("input.context.nested.x".to_owned()),
        1 => Just("input.agent.categories".to_owned()),
    ]
}

fn condition() -> impl Strategy<Value = String> {
    let op = prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]);
    let leaf = prop_oneof![
        (path(), op.clone(), literal()).prop_map(|(p, o, l)| format!("{p} {o} {l}")),
        (literal(), op, path()).prop_map(|(l, o, p)| format!("{l} {o} {p}")),
        (path(), literal(), literal()).prop_map(|(p, a, b)| format!("{p} in {{{a}, {b}}}")),
        (literal(), path()).prop_map(|(l, p)| format!("{l} in {p}")),
        (
            path(),
            prop::sample::select(vec!["startswith", "endswith", "contains"]),
            prop::sample::select(vec!["\"p\"", "\"d\"", "\"\""])
        )
            .prop_map(|(p, f, s)| format!("{f}({p}, {s})")),
        path().prop_map(|p| format!("regex.match(`^p.*d?$`, {p})")),
        (path(), prop::sample::select(vec![">", "==", "<"]), 0..3u8)
            .prop_map(|(p, o, n)| format!("count({p}) {o} {n}")),
        path().prop_map(|p| format!("lower({p}) == \"prod\"")),
        path(),
    ];
    prop_oneof![
        4 => leaf.clone(),
        1 => leaf.prop_map(|c| format!("not {c}")),
    ]
}

fn module() -> impl Strategy<Value = String> {
    let body = prop::collection::vec(condition(), 1..4);
    let decision = prop::sample::select(vec!["deny", "permit", "mask", "approval_required"]);
    (
        prop::collection::vec((decision, body), 1..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(defs, helper, default)| {
            let mut src = String::from("package gen\n");
            if helper {
                src.push_str("is_p if startswith(input.action, \"p\")\n");
            }
            if default {
                src.push_str("default decision := \"permit\"\n");
            }
            for (i, (d, conds)) in defs.iter().enumerate() {
                let mut conds = conds.clone();
                if helper && i == 0 {
                    conds.push("is_p".to_owned());
                }
                src.push_str(&format!(
                    "decision := \"{d}\" if {{\n  {}\n}}\n",
                    conds.join(";\n  ")
                ));
            }
            src.push_str("redactions := [{\"field\": \"a\"}]\n");
            src
        })
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("prod")),
        Just(json!("PROD")),
        Just(json!("dev")),
        Just(json!("pd")),
        Just(json!("")),
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(5.0)),
        Just(json!(2.5)),
        Just(json!(-3)),
        Just(json!(true)),
        Just(json!(false)),
        Just(json!(null)),
    ]
}

fn field_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        1 => Just(None),
        4 => scalar().prop_map(Some),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(|v| Some(Value::Array(v))),
        1 => Just(Some(json!([1, "p"]))),
        1 => Just(Some(json!({"x": "prod"}))),
    ]
}

fn context() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(field_value(), 3),
        field_value(),
        field_value(),
    )
        .prop_map(|(fields, items, nested_x)| {
            let mut m = serde_json::Map::new();
            for (name, v) in FIELDS.iter().zip(fields) {
                if let Some(v) = v {
                    m.insert((*name).to_owned(), v);
                }
            }
            if let Some(v) = items {
                m.insert("items".into(), v);
            }
            if let Some(v) = nested_x {
                m.insert("nested".into(), json!({ "x": v }));
            }
            Value::Object(m)
        })
}

fn set_for(source: &str, strategy: Compile) -> PolicySet {
    let rule = bundle_rule(1, "R-0001", vec![Facet::Action], source);
    let compiled = CompiledRule::compile_with(&rule, strategy)
        .unwrap_or_else(|e| panic!("generated rule must compile: {e}\n{source}"));
    PolicySet::new(
        vec![Arc::new(compiled)],
        agent(AgentAttributes {
            categories: vec!["p".into(), "prod".into()],
            ..AgentAttributes::default()
        }),
        NoCoverageSettings::default(),
    )
}

/// What must agree: the decision, which rule decided, and whether evaluation failed.
fn summary(v: &Verdict) -> (Decision, Option<String>, bool) {
    (
        v.decision,
        v.rule_code.clone(),
        v.reason.contains("could not be evaluated"),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, .. ProptestConfig::default() })]

    #[test]
    fn native_and_regorus_agree(
        source in module(),
        inputs in prop::collection::vec((prop::sample::select(vec!["pay", "prod_restart", "get_x", "p"]), context()), 1..6),
    ) {
        let native = set_for(&source, Compile::PreferNative);
        prop_assert!(native.rules()[0].is_native(), "generated rule should lower natively:\n{}", source);
        let reference = set_for(&source, Compile::RegorusOnly);
        prop_assert!(!reference.rules()[0].is_native());
        for (action, context) in inputs {
            let input = ActionInput {
                agent_id: "agent-1".into(),
                target_app: "app".into(),
                action: action.to_owned(),
                context,
            };
            let (n, r) = (native.decide_action(&input), reference.decide_action(&input));
            prop_assert_eq!(summary(&n), summary(&r), "\nsource:\n{}\ninput: {:?}\nnative: {:?}\nregorus: {:?}", source, input, n, r);
        }
    }
}

#[test]
fn typical_rules_run_natively() {
    let sources = [
        "package a\ndecision := \"deny\" if { input.target_app == \"github\"; startswith(input.action, \"delete_\") }",
        "package a\nlimit := 5\ndecision := \"approval_required\" if input.context.amount > limit",
        "package a\ndecision := \"deny\" if input.action in {\"a\", \"b\"}\nreason := \"no\"",
    ];
    for s in sources {
        assert!(
            set_for(s, Compile::PreferNative).rules()[0].is_native(),
            "{s}"
        );
    }
    let fallback = "package a\ndecision := \"deny\" if { some x in input.context.l; x == 1 }";
    assert!(!set_for(fallback, Compile::PreferNative).rules()[0].is_native());
}
