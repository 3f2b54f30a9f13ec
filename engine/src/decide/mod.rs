//! The decision cascade (DESIGN §4) over a compiled rule set.
//!
//! A [`PolicySet`] is the rules one agent is governed by, compiled, ordered
//! and indexed, together with the agent's attributes, modes and no-coverage
//! settings. It is immutable and `Send + Sync`: build it off the request
//! path, share it behind an `Arc`, and swap it whole when the bundle changes.

mod guard;
mod prefetch;
mod rule;
mod verdict;

use foldhash::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use rule::CompiledRule;
pub(crate) use rule::TierRequirement;
pub use verdict::{RuleHit, UnifiedVerdict, Verdict};

use crate::classify::classify;
use serde_json::Value;

use crate::dialect::Matched;
use crate::dialect::native::PathKey;
use crate::dialect::value::Val;
use crate::input::{AgentDoc, InputDoc, View};
use crate::model::{
    ActionClass, ActionInput, AgentAttributes, AgentMode, AgentNoCoverage, DELEGATE_ACTION,
    Decision, DelegationInput, Facet, HitlFallback, ModeByOperation, NoCoverageSettings,
    NoCoverageValue, ReasonCode, RetrievalInput, TrustTier,
};
use guard::Guards;
use prefetch::Prefetch;

/// The agent a policy set governs.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentContext {
    /// The agent's logical id.
    pub agent_id: String,
    /// The agent's resolved mode.
    pub mode: AgentMode,
    /// Per-operation overrides.
    pub mode_by_operation: ModeByOperation,
    /// Attributes rules see as `input.agent`.
    pub attributes: AgentAttributes,
}

/// Action rules in cascade order, indexed so that most are never evaluated.
#[derive(Debug, Default)]
struct FacetRules {
    /// Rules no index can place: always candidates.
    unscoped: Vec<u32>,
    /// Rules that only match one `target_app` (and pin no path).
    by_app: HashMap<String, Vec<u32>>,
    /// Rules that can only match when some path of `input` equals a literal.
    by_path: Vec<PathIndex>,
}

/// The rules pinned to literals of one path (`input.action`, `input.context.env`, …).
#[derive(Debug)]
struct PathIndex {
    path: PathKey,
    /// The path's slot in the request's path cache.
    slot: u32,
    strings: HashMap<Box<str>, Vec<u32>>,
    /// Numbers, booleans and null: few, compared by value.
    others: Vec<(Value, Vec<u32>)>,
}

impl PathIndex {
    fn insert(&mut self, literal: Value, rule: u32) {
        let list = match literal {
            Value::String(s) => self.strings.entry(s.into_boxed_str()).or_default(),
            v => {
                let pos = self
                    .others
                    .iter()
                    .position(|(o, _)| Val::of(o).equals(&Val::of(&v)));
                let pos = pos.unwrap_or_else(|| {
                    self.others.push((v, Vec::new()));
                    self.others.len() - 1
                });
                &mut self.others[pos].1
            }
        };
        if list.last() != Some(&rule) {
            list.push(rule);
        }
    }

    /// Adds the rules whose literal equals the request's value at the path.
    fn collect(&self, doc: &InputDoc<'_>, out: &mut Vec<u32>) {
        let Some(v) = doc.path(self.slot, &self.path) else {
            return;
        };
        let hit = match &v {
            Val::Str(s) => self.strings.get(s.as_ref()),
            other => self
                .others
                .iter()
                .find(|(o, _)| Val::of(o).equals(other))
                .map(|(_, l)| l),
        };
        if let Some(list) = hit {
            out.extend_from_slice(list);
        }
    }
}

/// A compiled, ordered, indexed rule set for one agent.
#[derive(Debug)]
pub struct PolicySet {
    rules: Vec<Arc<CompiledRule>>,
    /// Every distinct `input` path the rules read: a request resolves each at
    /// most once, however many rules read it.
    paths: Vec<PathKey>,
    /// For each rule (by position), the cache slot of each of its paths.
    slots: Vec<Box<[u32]>>,
    /// Each rule's necessary conditions, checked before the rule is touched.
    guards: Guards,
    /// Sibling paths every action request reads, resolved in one walk.
    prefetch: Prefetch,
    action: FacetRules,
    retrieval: Vec<u32>,
    delegation: Vec<u32>,
    agent: AgentContext,
    agent_doc: AgentDoc,
    modes: [AgentMode; 3],
    no_coverage: NoCoverageSettings,
}

impl PolicySet {
    /// Orders and indexes `rules` (already compiled, possibly shared with other
    /// sets) for `agent`.
    pub fn new(
        mut rules: Vec<Arc<CompiledRule>>,
        agent: AgentContext,
        no_coverage: NoCoverageSettings,
    ) -> PolicySet {
        rules.sort_by(|a, b| rule::cascade_order(a, b));
        let mut paths = PathTable::default();
        let slots: Vec<Box<[u32]>> = rules
            .iter()
            .map(|r| r.policy.paths().iter().map(|p| paths.slot(p)).collect())
            .collect();
        let mut guards = Guards::default();
        for (r, s) in rules.iter().zip(&slots) {
            guards.push(&r.policy, s);
        }
        let mut action = FacetRules::default();
        let (mut retrieval, mut delegation) = (Vec::new(), Vec::new());
        for (i, r) in rules.iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 2^32 rules");
            if r.applies(Facet::Action) {
                match (r.policy.index_keys(), &r.target_app) {
                    (Some(keys), _) => {
                        for (path, literals) in keys {
                            let pos = action
                                .by_path
                                .iter()
                                .position(|p| p.path == path)
                                .unwrap_or_else(|| {
                                    action.by_path.push(PathIndex {
                                        slot: paths.slot(&path),
                                        path,
                                        strings: HashMap::default(),
                                        others: Vec::new(),
                                    });
                                    action.by_path.len() - 1
                                });
                            for lit in literals {
                                action.by_path[pos].insert(lit, i);
                            }
                        }
                    }
                    (None, Some(app)) => action.by_app.entry(app.clone()).or_default().push(i),
                    (None, None) => action.unscoped.push(i),
                }
            }
            if r.applies(Facet::Retrieval) {
                retrieval.push(i);
            }
            if r.applies(Facet::Delegation) {
                delegation.push(i);
            }
        }
        // Read on every action request: the index's paths, and the guards of
        // the rules every request is checked against.
        let hot = action.by_path.iter().map(|p| p.slot).chain(
            action
                .unscoped
                .iter()
                .flat_map(|&i| guards.slots(i))
                .collect::<Vec<_>>(),
        );
        let prefetch = Prefetch::new(&paths.paths, hot);
        let modes = Facet::ALL.map(|f| {
            crate::model::resolve_mode(f, &agent.mode_by_operation, Some(agent.mode), agent.mode)
        });
        PolicySet {
            agent_doc: AgentDoc::new(&agent.agent_id, agent.mode, &agent.attributes),
            rules,
            paths: paths.paths,
            slots,
            guards,
            prefetch,
            action,
            retrieval,
            delegation,
            agent,
            modes,
            no_coverage,
        }
    }

    /// The agent this set governs.
    pub fn agent(&self) -> &AgentContext {
        &self.agent
    }

    /// The no-coverage settings in force.
    pub fn no_coverage(&self) -> &NoCoverageSettings {
        &self.no_coverage
    }

    /// Rules in cascade order.
    pub fn rules(&self) -> &[Arc<CompiledRule>] {
        &self.rules
    }

    /// The mode a facet runs in.
    pub fn mode(&self, facet: Facet) -> AgentMode {
        self.modes[facet as usize]
    }

    /// Decides an action (tool call, write).
    pub fn decide_action(&self, input: &ActionInput) -> Verdict {
        let mode = self.mode(Facet::Action);
        if mode == AgentMode::Off {
            return Verdict::new(Facet::Action, Decision::Permit, "").in_mode(mode);
        }
        let doc = InputDoc::new(
            View::Action {
                input,
                agent: &self.agent_doc,
            },
            self.paths.len(),
        );
        self.prefetch.run(&doc);
        let mut hits = Vec::new();
        for index in &self.action.by_path {
            index.collect(&doc, &mut hits);
        }
        hits.sort_unstable();
        hits.dedup();
        for i in self.action_candidates(&input.target_app, &hits) {
            if !self.guards.may_match(i, &doc, &self.paths) {
                continue;
            }
            let rule = &self.rules[i as usize];
            if !rule.passes_prefilters(&input.target_app, &input.action) {
                continue;
            }
            match rule.policy.evaluate(&doc, &self.slots[i as usize]) {
                Ok(None) => continue,
                Ok(Some(m)) => return self.action_match(Facet::Action, rule, m).in_mode(mode),
                Err(e) => return evaluation_failed(Facet::Action, rule, &e.0).in_mode(mode),
            }
        }
        self.no_coverage_verdict(&input.action).in_mode(mode)
    }

    /// Decides a retrieval at `now` (emergency bypass expiry is checked then).
    pub fn decide_retrieval(&self, input: &RetrievalInput, now: DateTime<Utc>) -> Verdict {
        let mode = self.mode(Facet::Retrieval);
        if mode == AgentMode::Off {
            return Verdict::new(Facet::Retrieval, Decision::Allow, "").in_mode(mode);
        }
        let assigned = self.agent.attributes.trust_tier.as_deref();
        let tier = assigned.or(input.trust_tier.as_deref());
        let doc = InputDoc::new(
            View::Retrieval {
                input,
                agent: &self.agent_doc,
                trust_tier: tier,
            },
            self.paths.len(),
        );
        for &i in &self.retrieval {
            let rule = &self.rules[i as usize];
            if rule.bypass.is_in_force(now) {
                let mut v = Verdict::new(
                    Facet::Retrieval,
                    Decision::Allow,
                    format!("emergency bypass active on rule {}", rule.rule_code),
                );
                v.reason_code = Some(ReasonCode::EmergencyBypass);
                return hit(v, rule).in_mode(mode);
            }
            if !self.guards.may_match(i, &doc, &self.paths) {
                continue;
            }
            match rule.policy.evaluate(&doc, &self.slots[i as usize]) {
                Ok(None) => continue,
                Ok(Some(m)) => {
                    return self
                        .retrieval_match(rule, m, tier, input.surface.as_deref())
                        .in_mode(mode);
                }
                Err(e) => return evaluation_failed(Facet::Retrieval, rule, &e.0).in_mode(mode),
            }
        }
        let mut v = Verdict::new(
            Facet::Retrieval,
            Decision::Deny,
            "no retrieval rule matched",
        );
        v.reason_code = Some(ReasonCode::DefaultDeny);
        v.in_mode(mode)
    }

    /// Decides a delegation (`orchestrate.delegate`, projected onto the action
    /// facet's pre-filters). No matching rule denies.
    pub fn decide_delegation(&self, input: &DelegationInput) -> Verdict {
        let mode = self.mode(Facet::Delegation);
        if mode == AgentMode::Off {
            return Verdict::new(Facet::Delegation, Decision::Permit, "").in_mode(mode);
        }
        let context = serde_json::to_value(&input.context).unwrap_or_default();
        let doc = InputDoc::new(
            View::Delegation {
                input,
                context: &context,
                agent: &self.agent_doc,
            },
            self.paths.len(),
        );
        for &i in &self.delegation {
            if !self.guards.may_match(i, &doc, &self.paths) {
                continue;
            }
            let rule = &self.rules[i as usize];
            if !rule.passes_prefilters(&input.target_app, DELEGATE_ACTION) {
                continue;
            }
            match rule.policy.evaluate(&doc, &self.slots[i as usize]) {
                Ok(None) => continue,
                Ok(Some(m)) => return self.action_match(Facet::Delegation, rule, m).in_mode(mode),
                Err(e) => return evaluation_failed(Facet::Delegation, rule, &e.0).in_mode(mode),
            }
        }
        let mut v = Verdict::new(
            Facet::Delegation,
            Decision::Deny,
            "no rule permits orchestrate.delegate",
        );
        v.rule_code = Some(DELEGATION_DEFAULT_CODE.to_owned());
        v.in_mode(mode)
    }

    /// Candidate action rules in cascade order: the unscoped ones, the ones for
    /// this app, and the index hits, merged by position.
    fn action_candidates<'s>(&'s self, app: &str, hits: &'s [u32]) -> Merge<'s> {
        let empty: &[u32] = &[];
        let lists = [
            self.action.unscoped.as_slice(),
            self.action.by_app.get(app).map_or(empty, Vec::as_slice),
            hits,
        ];
        Merge::new(lists)
    }

    /// A matched action or delegation rule's verdict, in enforce form.
    fn action_match(&self, facet: Facet, rule: &CompiledRule, m: Matched) -> Verdict {
        let reason = m
            .reason
            .unwrap_or_else(|| format!("matched rule {} ({})", rule.rule_code, rule.name));
        let usable = m.redactions.as_ref().is_some_and(|r| r.is_usable());
        let mut v = Verdict::new(facet, m.decision, reason);
        v.reason_code = Some(if m.decision.is_pass() {
            ReasonCode::PolicyAllow
        } else {
            ReasonCode::PolicyDeny
        });
        match m.decision {
            Decision::Mask if usable => v.redactions = m.redactions,
            Decision::Mask => {
                v.decision = Decision::Deny;
                v.reason = format!(
                    "{} (mask rule has no usable redaction directives)",
                    v.reason
                );
            }
            Decision::ApprovalRequired => {
                let fallback = match m.hitl_fallback.unwrap_or_default() {
                    HitlFallback::Mask if usable => {
                        v.redactions = m.redactions;
                        HitlFallback::Mask
                    }
                    _ => HitlFallback::Deny,
                };
                v.hitl_fallback = Some(fallback);
                if !self.no_coverage.enduser_hitl_enabled {
                    v = resolve_without_approval(v);
                }
            }
            _ => {}
        }
        hit(v, rule)
    }

    fn retrieval_match(
        &self,
        rule: &CompiledRule,
        m: Matched,
        tier: Option<&str>,
        surface: Option<&str>,
    ) -> Verdict {
        let deny = |code: ReasonCode, reason: String| {
            let mut v = Verdict::new(Facet::Retrieval, Decision::Deny, reason);
            v.reason_code = Some(code);
            hit(v, rule)
        };
        if rule.principal_exclusions.contains(&self.agent.agent_id) {
            return deny(
                ReasonCode::PrincipalExcluded,
                format!("agent is excluded from rule {}", rule.rule_code),
            );
        }
        if let Some(required) = rule.trust_tier {
            let meets = match (required, tier.and_then(TrustTier::parse)) {
                (TierRequirement::Tier(req), Some(have)) => have.meets(req),
                _ => false,
            };
            if !meets {
                return deny(
                    ReasonCode::TierMismatch,
                    format!(
                        "rule {} requires a higher trust tier than {}",
                        rule.rule_code,
                        tier.unwrap_or("none")
                    ),
                );
            }
        }
        if let Some(s) = &rule.surface
            && surface != Some(s.as_str())
        {
            return deny(
                ReasonCode::SurfaceRestriction,
                format!("rule {} is restricted to surface {s}", rule.rule_code),
            );
        }
        let reason = m
            .reason
            .unwrap_or_else(|| format!("matched rule {} ({})", rule.rule_code, rule.name));
        let usable = m.redactions.as_ref().is_some_and(|r| r.is_usable());
        let mut v = Verdict::new(Facet::Retrieval, m.decision, reason);
        v.reason_code = Some(if m.decision == Decision::Allow {
            ReasonCode::PolicyAllow
        } else {
            ReasonCode::PolicyDeny
        });
        match m.decision {
            Decision::Redact if usable => v.redactions = m.redactions,
            Decision::Redact if m.fail_closed => {
                v.decision = Decision::Deny;
                v.reason = format!(
                    "{} (fail-closed redact with no usable directives)",
                    v.reason
                );
            }
            Decision::Redact => {
                v.reason = format!(
                    "{} (no usable directives: content passes unchanged)",
                    v.reason
                );
            }
            Decision::Escalate => {
                v.hitl_fallback = Some(match m.hitl_fallback.unwrap_or_default() {
                    HitlFallback::Mask if usable => {
                        v.redactions = m.redactions;
                        HitlFallback::Mask
                    }
                    _ => HitlFallback::Deny,
                });
            }
            _ => {}
        }
        hit(v, rule)
    }

    /// The no-coverage default for an uncovered action (DESIGN §4).
    fn no_coverage_verdict(&self, action: &str) -> Verdict {
        let class = classify(action);
        let value = match self.agent.attributes.no_coverage {
            Some(AgentNoCoverage::Open) => NoCoverageValue::Allow,
            Some(AgentNoCoverage::Closed) => NoCoverageValue::Deny,
            None => self.no_coverage.no_coverage_defaults.for_class(class),
        };
        let decision = match value {
            NoCoverageValue::Allow => Decision::Permit,
            NoCoverageValue::Deny => Decision::Deny,
            NoCoverageValue::Ask => Decision::ApprovalRequired,
        };
        let mut v = Verdict::new(
            Facet::Action,
            decision,
            format!(
                "no rule covers {action}; the {} default is {}",
                class.as_str(),
                value.as_str()
            ),
        );
        v.rule_code = Some(synthetic_code(class, value).to_owned());
        if decision == Decision::ApprovalRequired && !self.no_coverage.enduser_hitl_enabled {
            v = resolve_without_approval(v);
        }
        v
    }
}

/// The synthetic rule code of a no-coverage default (`D-READ-ALLOW`, …).
pub fn synthetic_code(class: ActionClass, value: NoCoverageValue) -> &'static str {
    use ActionClass::*;
    use NoCoverageValue::*;
    match (class, value) {
        (Read, Allow) => "D-READ-ALLOW",
        (Read, Deny) => "D-READ-DENY",
        (Read, Ask) => "D-READ-ASK",
        (Write, Allow) => "D-WRITE-ALLOW",
        (Write, Deny) => "D-WRITE-DENY",
        (Write, Ask) => "D-WRITE-ASK",
        (Delete, Allow) => "D-DELETE-ALLOW",
        (Delete, Deny) => "D-DELETE-DENY",
        (Delete, Ask) => "D-DELETE-ASK",
        (Admin, Allow) => "D-ADMIN-ALLOW",
        (Admin, Deny) => "D-ADMIN-DENY",
        (Admin, Ask) => "D-ADMIN-ASK",
    }
}

/// The synthetic rule code of an uncovered delegation.
pub const DELEGATION_DEFAULT_CODE: &str = "D-DELEGATE-DENY";

fn hit(mut v: Verdict, rule: &CompiledRule) -> Verdict {
    v.rule = Some(RuleHit {
        id: rule.id,
        rule_code: rule.rule_code.clone(),
    });
    v.rule_code = Some(rule.rule_code.clone());
    v
}

/// A rule that failed to evaluate decides `deny`: never a silent pass.
fn evaluation_failed(facet: Facet, rule: &CompiledRule, why: &str) -> Verdict {
    let mut v = Verdict::new(
        facet,
        Decision::Deny,
        format!("rule {} could not be evaluated: {why}", rule.rule_code),
    );
    v.reason_code = Some(ReasonCode::PolicyDeny);
    hit(v, rule)
}

/// End-user approvals are disabled: an approval gate cannot be answered, so it
/// resolves at once to its fallback (absent = deny).
fn resolve_without_approval(mut v: Verdict) -> Verdict {
    match v.hitl_fallback {
        Some(HitlFallback::Mask) => v.decision = Decision::Mask,
        _ => {
            v.decision = Decision::Deny;
            v.redactions = None;
        }
    }
    v.reason = format!("{} (end-user approvals are disabled)", v.reason);
    v
}

/// Numbers distinct paths as a policy set is built.
#[derive(Default)]
struct PathTable {
    paths: Vec<PathKey>,
    by_key: HashMap<PathKey, u32>,
}

impl PathTable {
    fn slot(&mut self, path: &PathKey) -> u32 {
        if let Some(&slot) = self.by_key.get(path) {
            return slot;
        }
        let slot = u32::try_from(self.paths.len()).expect("fewer than 2^32 paths");
        self.paths.push(path.clone());
        self.by_key.insert(path.clone(), slot);
        slot
    }
}

/// Merges up to three ascending index lists (each rule is in at most one).
struct Merge<'s> {
    /// The lists not yet exhausted, first `live` of them.
    lists: [&'s [u32]; 3],
    live: usize,
}

impl<'s> Merge<'s> {
    fn new(lists: [&'s [u32]; 3]) -> Merge<'s> {
        let mut m = Merge {
            lists: [&[]; 3],
            live: 0,
        };
        for list in lists.into_iter().filter(|l| !l.is_empty()) {
            m.lists[m.live] = list;
            m.live += 1;
        }
        m
    }
}

impl Iterator for Merge<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        // Usually one list is live (the unscoped rules, or one app's): no
        // comparison is needed then.
        let k = match self.live {
            0 => return None,
            1 => 0,
            n => (1..n).fold(0, |best, k| {
                if self.lists[k][0] < self.lists[best][0] {
                    k
                } else {
                    best
                }
            }),
        };
        let (&v, rest) = self.lists[k].split_first()?;
        self.lists[k] = rest;
        if rest.is_empty() {
            self.lists[k..self.live].rotate_left(1);
            self.live -= 1;
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_yields_every_list_in_ascending_order() {
        let (a, b, c) = ([1, 4, 9], [2, 3, 10, 11], [0, 5]);
        let merged: Vec<u32> = Merge::new([&a, &b, &c]).collect();
        assert_eq!(merged, [0, 1, 2, 3, 4, 5, 9, 10, 11]);
        let one: Vec<u32> = Merge::new([&[], &b, &[]]).collect();
        assert_eq!(one, b);
        assert_eq!(Merge::new([&[], &[], &[]]).count(), 0);
    }

    /// Guards the contract the sidecar relies on: one `PolicySet` is shared by
    /// every worker thread behind an `Arc`, with no lock.
    #[test]
    fn policy_sets_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PolicySet>();
        assert_send_sync::<CompiledRule>();
        assert_send_sync::<Verdict>();
    }
}
