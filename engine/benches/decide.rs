//! Decision latency: Warden's native path against a hand-written Rust baseline
//! and the regorus interpreter on the same bundle, in the same run.
//!
//! Run: `cargo bench -p warden-engine --bench decide`
//!
//! Bundles of 1, 100 and 1,000 rules:
//! - `nothing_matches`: the worst case. No rule has a `target_app` or literal
//!   action, so every rule passes the pre-filters and is evaluated, and none
//!   matches (each compares two context fields to values the request lacks).
//! - `nothing_matches_unindexed`: the same, but with conditions no index can
//!   use (`startswith`, `>`), so every rule is evaluated on every request.
//! - `fallback`: rules outside the native subset (iteration with `some`),
//!   nothing matches: regorus's RVM bytecode (what Warden runs them on)
//!   against the regorus interpreter.
//! - `typical_mix`: rules scoped by app and literal actions, globs and a few
//!   unscoped rules; the request matches one rule near the end of its app.
//! - `threads`: 10,000 worst-case decisions on one thread vs split over two.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use uuid::Uuid;
use warden_engine::model::{
    ActionInput, AgentAttributes, AgentMode, BundleRule, Bypass, Decision, Facet, ModeByOperation,
    NoCoverageSettings,
};
use warden_engine::{AgentContext, CompiledRule, PolicySet, Runtime, Strategy};

const SIZES: [usize; 3] = [1, 100, 1000];

fn bundle_rule(
    i: usize,
    rego: String,
    target_app: Option<String>,
    pattern: Option<String>,
) -> BundleRule {
    BundleRule {
        id: Uuid::from_u128(i as u128 + 1),
        rule_code: format!("R-{:04}", i + 1),
        name: format!("rule {i}"),
        description: None,
        effect: Decision::Deny,
        rego_source: rego,
        applies_to: vec![Facet::Action],
        priority: -(i as i64),
        created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
        target_app,
        action_pattern: pattern,
        trust_tier: None,
        surface: None,
        principal_exclusions: None,
        bypass: Bypass::default(),
    }
}

/// Rule i denies when context field `f{i%40}` equals a value the request never has.
fn worst_case_rules(n: usize) -> Vec<BundleRule> {
    (0..n)
        .map(|i| {
            let rego = format!(
                "package bench.r{i}\ndecision := \"deny\" if {{\n  input.context.f{f} == \"absent-{i}\"\n  input.context.f{g} == \"v{g}\"\n}}",
                f = i % 40,
                g = (i + 1) % 40
            );
            bundle_rule(i, rego, None, None)
        })
        .collect()
}

/// Rules no index can place (prefix tests and numeric bounds): every one is
/// evaluated on every request, and none matches.
fn unindexable_rules(n: usize) -> Vec<BundleRule> {
    (0..n)
        .map(|i| {
            let rego = format!(
                "package bench.u{i}\ndecision := \"deny\" if {{\n  startswith(input.context.f{f}, \"zz{i}\")\n  input.context.amount > {i}\n}}",
                f = i % 40
            );
            bundle_rule(i, rego, None, None)
        })
        .collect()
}

/// Rules outside the native subset: each iterates `input.context.tags`.
fn fallback_rules(n: usize) -> Vec<BundleRule> {
    (0..n)
        .map(|i| {
            let rego = format!(
                "package bench.x{i}\ndecision := \"deny\" if {{\n  some tag in input.context.tags\n  tag == \"absent-{i}\"\n}}"
            );
            bundle_rule(i, rego, None, None)
        })
        .collect()
}

/// Rules spread over 20 apps, mostly with literal actions, some globs.
fn typical_rules(n: usize) -> Vec<BundleRule> {
    (0..n)
        .map(|i| {
            let app = format!("app{}", i % 20);
            match i % 5 {
                0 => bundle_rule(i, format!("package t.r{i}\ndecision := \"deny\" if {{ input.action == \"act{i}\"; input.context.f1 == \"v1\" }}"), None, None),
                1 => bundle_rule(i, format!("package t.r{i}\ndecision := \"approval_required\" if input.context.amount > {}", 1000 + i), Some(app), Some("create_*".into())),
                2 => bundle_rule(i, format!("package t.r{i}\ndecision := \"deny\" if input.action in {{\"drop{i}\", \"truncate{i}\"}}"), Some(app), None),
                3 => bundle_rule(i, format!("package t.r{i}\ndecision := \"permit\" if {{ input.action == \"act{i}\"; startswith(input.context.f2, \"v\") }}"), Some(app), None),
                _ => bundle_rule(i, format!("package t.r{i}\ndecision := \"deny\" if {{ input.target_app == \"{app}\"; input.context.f3 == \"nope\" }}"), Some(app), None),
            }
        })
        .collect()
}

fn policy(rules: &[BundleRule], strategy: Strategy) -> PolicySet {
    let compiled = rules
        .iter()
        .map(|r| Arc::new(CompiledRule::compile_with(r, strategy).expect("bench rules compile")))
        .collect();
    PolicySet::new(
        compiled,
        AgentContext {
            agent_id: "agent-1".into(),
            mode: AgentMode::Enforce,
            mode_by_operation: ModeByOperation::new(),
            attributes: AgentAttributes::default(),
        },
        NoCoverageSettings::default(),
    )
}

/// A request with a context of about 2 KB.
fn request(app: &str, action: &str) -> ActionInput {
    let mut ctx = serde_json::Map::new();
    for f in 0..40 {
        ctx.insert(format!("f{f}"), json!(format!("v{f}-{}", "x".repeat(40))));
    }
    ctx.insert("f1".into(), json!("v1"));
    ctx.insert("amount".into(), json!(5000));
    ctx.insert("tags".into(), json!(["finance", "eu", "q3"]));
    ActionInput {
        agent_id: "agent-1".into(),
        target_app: app.into(),
        action: action.into(),
        context: Value::Object(ctx),
    }
}

/// The hand-written baseline: each rule is two string-equality checks on the
/// context, written directly in Rust.
struct Baseline(Vec<[(String, String); 2]>);

impl Baseline {
    fn new(n: usize) -> Baseline {
        Baseline(
            (0..n)
                .map(|i| {
                    [
                        (format!("f{}", i % 40), format!("absent-{i}")),
                        (format!("f{}", (i + 1) % 40), format!("v{}", (i + 1) % 40)),
                    ]
                })
                .collect(),
        )
    }

    fn decide(&self, input: &ActionInput) -> Option<usize> {
        let ctx = input.context.as_object()?;
        self.0.iter().position(|checks| {
            checks
                .iter()
                .all(|(k, v)| ctx.get(k).and_then(Value::as_str) == Some(v.as_str()))
        })
    }
}

fn nothing_matches(c: &mut Criterion) {
    let mut g = c.benchmark_group("nothing_matches");
    let req = request("billing", "update_invoice");
    for n in SIZES {
        let rules = worst_case_rules(n);
        let native = policy(&rules, Strategy::PreferNative);
        assert!(native.rules().iter().all(|r| r.is_native()));
        assert_eq!(
            native.decide_action(&req).rule_code.as_deref(),
            Some("D-WRITE-ALLOW")
        );
        let baseline = Baseline::new(n);
        assert_eq!(baseline.decide(&req), None);
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("warden", n), &n, |b, _| {
            b.iter(|| black_box(native.decide_action(black_box(&req))))
        });
        g.bench_with_input(BenchmarkId::new("baseline_rust", n), &n, |b, _| {
            b.iter(|| black_box(baseline.decide(black_box(&req))))
        });
        if n <= 100 {
            let rego = policy(&rules, Strategy::RegorusOnly);
            assert_eq!(
                rego.decide_action(&req).rule_code.as_deref(),
                Some("D-WRITE-ALLOW")
            );
            g.bench_with_input(BenchmarkId::new("regorus", n), &n, |b, _| {
                b.iter(|| black_box(rego.decide_action(black_box(&req))))
            });
        }
    }
    g.finish();
}

fn nothing_matches_unindexed(c: &mut Criterion) {
    let mut g = c.benchmark_group("nothing_matches_unindexed");
    let req = request("billing", "update_invoice");
    for n in SIZES {
        let rules = unindexable_rules(n);
        let native = policy(&rules, Strategy::PreferNative);
        assert!(native.rules().iter().all(|r| r.is_native()));
        assert_eq!(
            native.decide_action(&req).rule_code.as_deref(),
            Some("D-WRITE-ALLOW")
        );
        g.bench_with_input(BenchmarkId::new("warden", n), &n, |b, _| {
            b.iter(|| black_box(native.decide_action(black_box(&req))))
        });
        if n <= 100 {
            let rego = policy(&rules, Strategy::RegorusOnly);
            g.bench_with_input(BenchmarkId::new("regorus", n), &n, |b, _| {
                b.iter(|| black_box(rego.decide_action(black_box(&req))))
            });
        }
    }
    g.finish();
}

fn fallback(c: &mut Criterion) {
    let mut g = c.benchmark_group("fallback");
    let req = request("billing", "update_invoice");
    for n in [1, 100] {
        let rules = fallback_rules(n);
        let rvm = policy(&rules, Strategy::PreferNative);
        assert!(rvm.rules().iter().all(|r| r.runtime() == Runtime::Rvm));
        let interpreter = policy(&rules, Strategy::RegorusOnly);
        for set in [&rvm, &interpreter] {
            assert_eq!(
                set.decide_action(&req).rule_code.as_deref(),
                Some("D-WRITE-ALLOW")
            );
        }
        g.bench_with_input(BenchmarkId::new("warden_rvm", n), &n, |b, _| {
            b.iter(|| black_box(rvm.decide_action(black_box(&req))))
        });
        g.bench_with_input(BenchmarkId::new("regorus", n), &n, |b, _| {
            b.iter(|| black_box(interpreter.decide_action(black_box(&req))))
        });
    }
    g.finish();
}

fn typical_mix(c: &mut Criterion) {
    let mut g = c.benchmark_group("typical_mix");
    for n in SIZES {
        let rules = typical_rules(n);
        let native = policy(&rules, Strategy::PreferNative);
        // The request goes to app1 with a `create_*` action: it hits the first
        // glob rule of that app (rule 1) when the bundle has one.
        let req = request("app1", "create_charge");
        g.bench_with_input(BenchmarkId::new("warden", n), &n, |b, _| {
            b.iter(|| black_box(native.decide_action(black_box(&req))))
        });
    }
    g.finish();
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("threads");
    const DECISIONS: u64 = 10_000;
    let rules = worst_case_rules(100);
    let set = Arc::new(policy(&rules, Strategy::PreferNative));
    let req = Arc::new(request("billing", "update_invoice"));
    g.throughput(Throughput::Elements(DECISIONS));
    for workers in [1u64, 2] {
        g.bench_with_input(
            BenchmarkId::new("worst_100", workers),
            &workers,
            |b, &workers| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        std::thread::scope(|s| {
                            for _ in 0..workers {
                                let (set, req) = (set.clone(), req.clone());
                                s.spawn(move || {
                                    for _ in 0..DECISIONS / workers {
                                        black_box(set.decide_action(black_box(&req)));
                                    }
                                });
                            }
                        });
                        total += start.elapsed();
                    }
                    total
                })
            },
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = nothing_matches, nothing_matches_unindexed, fallback, typical_mix, threads
}
criterion_main!(benches);
