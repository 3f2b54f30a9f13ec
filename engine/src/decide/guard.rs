//! Rule guards: the simple necessary conditions of every rule of a set,
//! compiled into one flat array that the cascade reads before it touches a
//! rule.
//!
//! A rule's guard is, for each body that can define its `decision`, the
//! conditions of that body that compare a path of `input` with a literal
//! (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in {…}`, `startswith`, `endswith`,
//! `contains`). The rule can only match when, for some body, all of them hold.
//! A guard is a filter, never a verdict: a rule whose guard holds is then
//! evaluated in full, and a body with no such condition leaves the rule
//! unguarded (always evaluated). Each test decides exactly what the native
//! condition it comes from decides, so a guard never skips a rule that would
//! have matched.
//!
//! Why: evaluating the condition tree of every unindexed rule means chasing
//! pointers through each rule's own allocations; the guards of a thousand
//! rules are a few contiguous arrays, and the request's paths are resolved
//! once each (see `InputDoc::path`).

use serde_json::Value;

use crate::dialect::Policy;
use crate::dialect::native::{Body, Call, CmpOp, Cond, PathKey, Term};
use crate::dialect::value::{Num, Val};
use crate::input::InputDoc;

/// The guards of a policy set, by rule position.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    /// Each rule's bodies as a range of `bodies`; `None`: always evaluate.
    rules: Vec<Option<(u32, u32)>>,
    /// Each body's tests as a range of `tests`.
    bodies: Vec<(u32, u32)>,
    tests: Vec<Test>,
    /// String literals, back to back.
    pool: String,
    /// Set literals (sorted and deduplicated, as in `Term::Set`).
    sets: Vec<Vec<Value>>,
}

/// One comparison of the value at a path (by its slot in the set's path
/// table) with a literal.
#[derive(Debug, Clone, Copy)]
enum Test {
    Cmp { slot: u32, op: CmpOp, lit: Lit },
    Str { slot: u32, op: StrOp, lit: Span },
    In { slot: u32, set: u32 },
}

#[derive(Debug, Clone, Copy)]
enum StrOp {
    StartsWith,
    EndsWith,
    Contains,
}

/// A scalar literal; strings live in the pool.
#[derive(Debug, Clone, Copy)]
enum Lit {
    Null,
    Bool(bool),
    Num(Num),
    Str(Span),
}

#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
}

impl Guards {
    /// Adds the guard of the next rule, whose policy's paths sit at `slots`
    /// of the set's path table.
    pub(crate) fn push(&mut self, policy: &Policy, slots: &[u32]) {
        let guard = policy
            .decision_bodies()
            .and_then(|bodies| self.compile(&bodies, slots));
        self.rules.push(guard);
    }

    fn compile(&mut self, bodies: &[&Body], slots: &[u32]) -> Option<(u32, u32)> {
        let (tests, first_body) = (self.tests.len(), self.bodies.len());
        for body in bodies {
            let start = self.tests.len();
            for cond in &body.0 {
                if let Some(test) = self.test(cond, slots) {
                    self.tests.push(test);
                }
            }
            if self.tests.len() == start {
                // This body cannot be filtered: neither can the rule.
                self.tests.truncate(tests);
                self.bodies.truncate(first_body);
                return None;
            }
            self.bodies.push((index(start), index(self.tests.len())));
        }
        (!bodies.is_empty()).then(|| (index(first_body), index(self.bodies.len())))
    }

    fn test(&mut self, cond: &Cond, slots: &[u32]) -> Option<Test> {
        let slot = |t: &Term| match t {
            Term::Path(local) => slots.get(*local as usize).copied(),
            _ => None,
        };
        match cond {
            Cond::Cmp(op, a, Term::Const(v)) => Some(Test::Cmp {
                slot: slot(a)?,
                op: *op,
                lit: self.lit(v)?,
            }),
            Cond::Cmp(op, Term::Const(v), b) => Some(Test::Cmp {
                slot: slot(b)?,
                op: op.flip(),
                lit: self.lit(v)?,
            }),
            Cond::Member(a, Term::Set(items)) => {
                let slot = slot(a)?;
                self.sets.push(items.clone());
                Some(Test::In {
                    slot,
                    set: index(self.sets.len() - 1),
                })
            }
            Cond::Truthy(Term::Call(call)) => {
                let (op, a, b) = match call.as_ref() {
                    Call::StartsWith(a, b) => (StrOp::StartsWith, a, b),
                    Call::EndsWith(a, b) => (StrOp::EndsWith, a, b),
                    Call::Contains(a, b) => (StrOp::Contains, a, b),
                    _ => return None,
                };
                let Term::Const(Value::String(s)) = b else {
                    return None;
                };
                Some(Test::Str {
                    slot: slot(a)?,
                    op,
                    lit: self.intern(s),
                })
            }
            _ => None,
        }
    }

    fn lit(&mut self, v: &Value) -> Option<Lit> {
        Some(match v {
            Value::Null => Lit::Null,
            Value::Bool(b) => Lit::Bool(*b),
            Value::Number(n) => Lit::Num(Num::of(n)),
            Value::String(s) => Lit::Str(self.intern(s)),
            Value::Array(_) | Value::Object(_) => return None,
        })
    }

    fn intern(&mut self, s: &str) -> Span {
        let start = index(self.pool.len());
        self.pool.push_str(s);
        Span {
            start,
            end: index(self.pool.len()),
        }
    }

    /// The slots every test of rule `rule`'s guard reads.
    pub(crate) fn slots(&self, rule: u32) -> impl Iterator<Item = u32> + '_ {
        let bodies = match self.rules.get(rule as usize) {
            Some(&Some((first, last))) => &self.bodies[first as usize..last as usize],
            _ => &[],
        };
        bodies
            .iter()
            .flat_map(|&(start, end)| &self.tests[start as usize..end as usize])
            .map(|t| match *t {
                Test::Cmp { slot, .. } | Test::Str { slot, .. } | Test::In { slot, .. } => slot,
            })
    }

    /// Whether rule `rule` can match `doc` (`paths` is the set's path table).
    pub(crate) fn may_match(&self, rule: u32, doc: &InputDoc<'_>, paths: &[PathKey]) -> bool {
        let Some(&Some((first, last))) = self.rules.get(rule as usize) else {
            return true;
        };
        self.bodies[first as usize..last as usize]
            .iter()
            .any(|&(start, end)| {
                self.tests[start as usize..end as usize]
                    .iter()
                    .all(|t| self.holds(t, doc, paths))
            })
    }

    fn holds(&self, test: &Test, doc: &InputDoc<'_>, paths: &[PathKey]) -> bool {
        let value = |slot: u32| doc.path_ref(slot, paths.get(slot as usize)?);
        match *test {
            Test::Cmp { slot, op, lit } => {
                let Some(v) = value(slot) else { return false };
                let lit = match lit {
                    Lit::Null => Val::Null,
                    Lit::Bool(b) => Val::Bool(b),
                    Lit::Num(n) => Val::Num(n),
                    Lit::Str(span) => Val::str(self.text(span)),
                };
                op.holds(v.cmp(&lit))
            }
            Test::Str { slot, op, lit } => {
                let Some(v) = value(slot) else { return false };
                let (Some(s), lit) = (v.as_str(), self.text(lit)) else {
                    return false;
                };
                let (b, l) = (s.as_bytes(), lit.as_bytes());
                match op {
                    StrOp::StartsWith => b.len() >= l.len() && same(&b[..l.len()], l),
                    StrOp::EndsWith => b.len() >= l.len() && same(&b[b.len() - l.len()..], l),
                    StrOp::Contains => s.contains(lit),
                }
            }
            Test::In { slot, set } => {
                let Some(v) = value(slot) else { return false };
                Val::Set(&self.sets[set as usize])
                    .contains_member(v)
                    .unwrap_or(false)
            }
        }
    }

    fn text(&self, span: Span) -> &str {
        &self.pool[span.start as usize..span.end as usize]
    }
}

/// Byte equality of two slices of the same length, inline for the short
/// literals rules use (a `memcmp` call costs more than comparing them).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    if b.len() <= 16 {
        a.iter().zip(b).all(|(x, y)| x == y)
    } else {
        a == b
    }
}

fn index(n: usize) -> u32 {
    u32::try_from(n).expect("guards of fewer than 2^32 entries")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::input::{AgentDoc, View};
    use crate::model::{ActionInput, AgentAttributes, AgentMode, Facet};

    /// Guards for `sources` (rule i's paths at slots numbered in order), and
    /// whether each rule may match a request with `context`.
    fn may_match(sources: &[&str], context: serde_json::Value) -> Vec<bool> {
        let policies: Vec<Policy> = sources
            .iter()
            .map(|s| Policy::compile(s, &[Facet::Action]).expect("compiles"))
            .collect();
        let mut paths: Vec<PathKey> = Vec::new();
        let mut guards = Guards::default();
        for p in &policies {
            let slots: Vec<u32> = p
                .paths()
                .iter()
                .map(|k| {
                    let pos = paths.iter().position(|q| q == k).unwrap_or_else(|| {
                        paths.push(k.clone());
                        paths.len() - 1
                    });
                    index(pos)
                })
                .collect();
            guards.push(p, &slots);
        }
        let input = ActionInput {
            agent_id: "a".into(),
            target_app: "app".into(),
            action: "get_x".into(),
            context,
        };
        let agent = AgentDoc::new("a", AgentMode::Enforce, &AgentAttributes::default());
        let doc = InputDoc::new(
            View::Action {
                input: &input,
                agent: &agent,
            },
            paths.len(),
        );
        (0..policies.len())
            .map(|i| guards.may_match(index(i), &doc, &paths))
            .collect()
    }

    #[test]
    fn a_failing_test_skips_the_rule() {
        let rules = [
            "package a\ndecision := \"deny\" if startswith(input.context.a, \"zz\")",
            "package a\ndecision := \"deny\" if { input.context.n > 10; endswith(input.context.a, \"z\") }",
            "package a\ndecision := \"deny\" if input.context.a in {\"x\", \"zzz\"}",
            "package a\ndecision := \"deny\" if 3 < input.context.n",
        ];
        assert_eq!(
            may_match(&rules, json!({"a": "v", "n": 2})),
            [false, false, false, false]
        );
        assert_eq!(
            may_match(&rules, json!({"a": "zzz", "n": 20})),
            [true, true, true, true]
        );
    }

    #[test]
    fn a_body_without_tests_leaves_the_rule_unguarded() {
        let rules = [
            // The second body has nothing a guard can test.
            "package a\ndecision := \"deny\" if input.context.a == \"x\"\ndecision := \"deny\" if regex.match(`^v`, input.context.a)",
            // A default makes the decision defined whatever the bodies do.
            "package a\ndefault decision := \"permit\"\ndecision := \"deny\" if input.context.a == \"x\"",
        ];
        assert_eq!(may_match(&rules, json!({"a": "q"})), [true, true]);
    }
}
