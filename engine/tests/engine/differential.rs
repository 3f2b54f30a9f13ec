//! Differential test: for generated rules inside the native subset and generated
//! inputs, the native path and regorus (the reference) decide the same.

use std::sync::Arc;

use super::fixtures::{agent, bundle_rule};
use proptest::prelude::*;
use serde_json::{Value, json};
use warden_engine::model::{ActionInput, AgentAttributes, Decision, Facet, NoCoverageSettings};
use warden_engine::{CompiledRule, PolicySet, Runtime, Strategy as Compile, Verdict};

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

/// Conditions outside the native subset: iteration, comprehensions and other
/// builtins. These run on regorus (RVM or interpreter).
fn fallback_condition() -> impl Strategy<Value = String> {
    prop_oneof![
        (path(), literal()).prop_map(|(p, l)| format!("some $v in {p}; $v == {l}")),
        path().prop_map(|p| format!("count([$v | some $v in {p}; $v != null]) > 1")),
        (prop::sample::select(FIELDS), literal())
            .prop_map(|(f, l)| format!("object.get(input.context, \"{f}\", \"none\") == {l}")),
        path().prop_map(|p| format!("sprintf(\"%v\", [{p}]) == \"prod\"")),
        path().prop_map(|p| format!("every $v in {p} {{ $v != \"dev\" }}")),
        path().prop_map(|p| format!("is_string({p})")),
        (path(), literal()).prop_map(|(p, l)| format!("{p}[_] == {l}")),
    ]
}

fn module() -> impl Strategy<Value = String> {
    module_of(condition().boxed())
}

/// Modules mixing native conditions with ones only regorus runs.
fn fallback_module() -> impl Strategy<Value = String> {
    module_of(prop_oneof![1 => condition(), 1 => fallback_condition()].boxed())
}

fn module_of(condition: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    let body = prop::collection::vec(condition, 1..4);
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
                let mut conds: Vec<String> = conds
                    .iter()
                    .enumerate()
                    .map(|(k, c)| c.replace("$v", &format!("v{k}")))
                    .collect();
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

/// A set of the rules in `sources`, in that cascade order. Several rules in
/// one set share the request's path cache and the set's guard table.
fn set_for(sources: &[String], strategy: Compile) -> PolicySet {
    let compiled = sources
        .iter()
        .enumerate()
        .map(|(i, source)| {
            let code = format!("R-{:04}", i + 1);
            let rule = bundle_rule(i as u128 + 1, &code, vec![Facet::Action], source);
            let compiled = CompiledRule::compile_with(&rule, strategy)
                .unwrap_or_else(|e| panic!("generated rule must compile: {e}\n{source}"));
            Arc::new(compiled)
        })
        .collect();
    PolicySet::new(
        compiled,
        agent(AgentAttributes {
            categories: vec!["p".into(), "prod".into()],
            ..AgentAttributes::default()
        }),
        NoCoverageSettings::default(),
    )
}

/// A few requests to decide in sequence on the same sets.
fn requests() -> impl Strategy<Value = Vec<ActionInput>> {
    let action = prop::sample::select(vec!["pay", "prod_restart", "get_x", "p"]);
    let request = (action, context()).prop_map(|(action, context)| ActionInput {
        agent_id: "agent-1".into(),
        target_app: "app".into(),
        action: action.to_owned(),
        context,
    });
    prop::collection::vec(request, 1..6)
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
        sources in prop::collection::vec(module(), 1..4),
        inputs in requests(),
    ) {
        let native = set_for(&sources, Compile::PreferNative);
        let source = sources.join("\n---\n");
        prop_assert!(native.rules().iter().all(|r| r.is_native()), "generated rules should lower natively:\n{}", source);
        let reference = set_for(&sources, Compile::RegorusOnly);
        prop_assert!(!reference.rules().iter().any(|r| r.is_native()));
        for input in inputs {
            let (n, r) = (native.decide_action(&input), reference.decide_action(&input));
            prop_assert_eq!(summary(&n), summary(&r), "\nsource:\n{}\ninput: {:?}\nnative: {:?}\nregorus: {:?}", source, input, n, r);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// The RVM path against the interpreter: the same decisions, including
    /// for VMs reused across inputs on one thread.
    #[test]
    fn rvm_and_interpreter_agree(
        sources in prop::collection::vec(fallback_module(), 1..3),
        inputs in requests(),
    ) {
        let rvm = set_for(&sources, Compile::PreferRvm);
        let reference = set_for(&sources, Compile::RegorusOnly);
        let source = sources.join("\n---\n");
        prop_assert!(reference.rules().iter().all(|r| r.runtime() == Runtime::Interpreter));
        for input in inputs {
            let (v, r) = (rvm.decide_action(&input), reference.decide_action(&input));
            // A known divergence inside regorus: iterating a scalar
            // (`some x in "s"`) is an error on the interpreter and undefined
            // on the RVM, as in OPA and as builtin type errors are on the
            // native path. Only inputs the interpreter evaluates are compared.
            if summary(&r).2 {
                continue;
            }
            prop_assert_eq!(summary(&v), summary(&r), "\nsource:\n{}\ninput: {:?}\nrvm: {:?}\ninterpreter: {:?}", source, input, v, r);
        }
    }
}

/// Rules outside the native subset run on RVM bytecode when regorus compiles
/// them, and the default strategy picks native, then RVM.
#[test]
fn fallback_rules_run_on_rvm() {
    let sources = [
        "package a\ndecision := \"deny\" if { some x in input.context.items; x == \"p\" }",
        "package a\ndecision := \"deny\" if count([x | some x in input.context.items; x != null]) > 1",
        "package a\ndecision := \"deny\" if object.get(input.context, \"a\", \"none\") == \"prod\"",
    ];
    for s in sources {
        let set = set_for(&[s.to_owned()], Compile::PreferNative);
        assert_eq!(set.rules()[0].runtime(), Runtime::Rvm, "{s}");
    }
    let native = "package a\ndecision := \"deny\" if input.action == \"x\"";
    assert_eq!(
        set_for(&[native.to_owned()], Compile::PreferNative).rules()[0].runtime(),
        Runtime::Native
    );
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
            set_for(&[s.to_owned()], Compile::PreferNative).rules()[0].is_native(),
            "{s}"
        );
    }
    let fallback = "package a\ndecision := \"deny\" if { some x in input.context.l; x == 1 }";
    assert!(!set_for(&[fallback.to_owned()], Compile::PreferNative).rules()[0].is_native());
}

/// Guards the native path's promise: deciding with rules in the native
/// subset never builds a regorus value of the input; one fallback rule does.
#[test]
fn native_decisions_build_no_regorus_values() {
    let native: Vec<String> = (0..100)
        .map(|i| {
            format!(
                "package r{i}\ndecision := \"deny\" if {{ input.target_app == \"app-{i}\"; startswith(input.action, \"drop_\"); input.context.amount > {i} }}"
            )
        })
        .collect();
    let set = set_for(&native, Compile::PreferNative);
    assert!(set.rules().iter().all(|r| r.is_native()));
    let input = ActionInput {
        agent_id: "a".into(),
        target_app: "app-7".into(),
        action: "drop_table".into(),
        context: json!({"amount": 3, "items": [1, 2]}),
    };
    let before = warden_engine::regorus_inputs_on_this_thread();
    for _ in 0..1_000 {
        set.decide_action(&input);
    }
    assert_eq!(warden_engine::regorus_inputs_on_this_thread(), before);

    let fallback = "package a\ndecision := \"deny\" if { some x in input.context.items; x == 2 }";
    let set = set_for(&[fallback.to_owned()], Compile::PreferNative);
    assert_eq!(set.decide_action(&input).decision, Decision::Deny);
    assert_eq!(
        warden_engine::regorus_inputs_on_this_thread(),
        before + 1,
        "the counter sees the fallback path"
    );
}
