//! The native form of a rule: a condition tree evaluated directly on the request.
//!
//! Semantics follow Rego's: a body succeeds when every condition does; a
//! condition over an undefined value fails (and so `not` of it succeeds); a
//! builtin given the wrong types is undefined, as in OPA's non-strict mode.

use std::borrow::Cow;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

use super::value::{Num, Val};
use crate::input::{InputDoc, Root};

/// One step below an `input` root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Seg {
    Key(Box<str>),
    Index(usize),
}

/// A value-producing expression.
#[derive(Debug, Clone)]
pub(crate) enum Term {
    /// A path of `input`, by its position in the policy's path table.
    Path(u32),
    Const(Value),
    /// A set literal, sorted and deduplicated.
    Set(Vec<Value>),
    Call(Box<Call>),
}

/// A supported builtin call.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    StartsWith(Term, Term),
    EndsWith(Term, Term),
    Contains(Term, Term),
    RegexMatch(Arc<Regex>, Term),
    Count(Term),
    Lower(Term),
    Upper(Term),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// Whether `a op b` holds, given `a.cmp(b)`.
    pub(crate) fn holds(self, o: std::cmp::Ordering) -> bool {
        match self {
            CmpOp::Eq => o.is_eq(),
            CmpOp::Ne => o.is_ne(),
            CmpOp::Lt => o.is_lt(),
            CmpOp::Le => o.is_le(),
            CmpOp::Gt => o.is_gt(),
            CmpOp::Ge => o.is_ge(),
        }
    }

    /// The operator with its operands swapped: `a op b` ⇔ `b op.flip() a`.
    pub(crate) fn flip(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            same => same,
        }
    }
}

/// One statement of a body.
#[derive(Debug, Clone)]
pub(crate) enum Cond {
    Cmp(CmpOp, Term, Term),
    /// `value in collection`.
    Member(Term, Term),
    /// A bare expression: succeeds when defined and not `false`.
    Truthy(Term),
    /// `x := term` whose variable was substituted away: succeeds when defined.
    Defined(Term),
    Not(Box<Cond>),
    /// An inlined boolean helper rule: succeeds when any of its bodies does.
    AnyOf(Arc<[Body]>),
}

/// A conjunction of conditions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Body(pub(crate) Vec<Cond>);

/// One definition of an output rule: alternatives tried in order (an `else`
/// chain; a plain definition has one), each with the value it yields.
#[derive(Debug, Clone)]
pub(crate) struct Definition {
    pub(crate) alternatives: Vec<(Body, Term)>,
}

/// A complete rule such as `decision` or `reason`: every definition is
/// evaluated; two that yield different values are a conflict, as in Rego.
#[derive(Debug, Clone, Default)]
pub(crate) struct Output {
    pub(crate) definitions: Vec<Definition>,
    pub(crate) default: Option<Term>,
}

/// Two definitions of a complete rule produced different values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Conflict;

/// What a policy is evaluated against: the request, the policy's own path
/// table, and where each of those paths sits in the request's path cache.
#[derive(Clone, Copy)]
pub(crate) struct Env<'e, 'a> {
    pub(crate) doc: &'e InputDoc<'a>,
    pub(crate) paths: &'e [PathKey],
    pub(crate) slots: &'e [u32],
}

impl<'e> Env<'e, '_> {
    /// The value of the policy's path number `local`.
    fn path(self, local: u32) -> Option<Val<'e>> {
        let local = local as usize;
        let path = self.paths.get(local)?;
        match self.slots.get(local) {
            Some(&slot) => self.doc.path(slot, path),
            None => self.doc.resolve(path),
        }
    }
}

impl Term {
    pub(crate) fn eval<'e>(&'e self, env: Env<'e, '_>) -> Option<Val<'e>> {
        match self {
            Term::Path(local) => env.path(*local),
            Term::Const(v) => Some(Val::of(v)),
            Term::Set(items) => Some(Val::Set(items)),
            Term::Call(call) => call.eval(env),
        }
    }
}

impl Call {
    fn eval<'e>(&'e self, env: Env<'e, '_>) -> Option<Val<'e>> {
        let strings = |a: &'e Term, b: &'e Term| -> Option<(Val<'e>, Val<'e>)> {
            let (x, y) = (a.eval(env)?, b.eval(env)?);
            (x.as_str().is_some() && y.as_str().is_some()).then_some((x, y))
        };
        match self {
            Call::StartsWith(a, b) => {
                let (x, y) = strings(a, b)?;
                Some(Val::Bool(x.as_str()?.starts_with(y.as_str()?)))
            }
            Call::EndsWith(a, b) => {
                let (x, y) = strings(a, b)?;
                Some(Val::Bool(x.as_str()?.ends_with(y.as_str()?)))
            }
            Call::Contains(a, b) => {
                let (x, y) = strings(a, b)?;
                Some(Val::Bool(x.as_str()?.contains(y.as_str()?)))
            }
            Call::RegexMatch(re, t) => {
                let v = t.eval(env)?;
                Some(Val::Bool(re.is_match(v.as_str()?)))
            }
            Call::Count(t) => {
                let n = t.eval(env)?.count()?;
                Some(Val::Num(Num::Int(n as i128)))
            }
            Call::Lower(t) => Some(Val::Str(Cow::Owned(t.eval(env)?.as_str()?.to_lowercase()))),
            Call::Upper(t) => Some(Val::Str(Cow::Owned(t.eval(env)?.as_str()?.to_uppercase()))),
        }
    }
}

impl Cond {
    pub(crate) fn holds(&self, env: Env<'_, '_>) -> bool {
        match self {
            Cond::Cmp(op, l, r) => {
                let (Some(a), Some(b)) = (l.eval(env), r.eval(env)) else {
                    return false;
                };
                op.holds(a.cmp(&b))
            }
            Cond::Member(item, coll) => {
                let (Some(x), Some(c)) = (item.eval(env), coll.eval(env)) else {
                    return false;
                };
                c.contains_member(&x).unwrap_or(false)
            }
            Cond::Truthy(t) => t.eval(env).is_some_and(|v| v.is_truthy()),
            Cond::Defined(t) => t.eval(env).is_some(),
            Cond::Not(c) => !c.holds(env),
            Cond::AnyOf(bodies) => bodies.iter().any(|b| b.holds(env)),
        }
    }
}

impl Body {
    pub(crate) fn holds(&self, env: Env<'_, '_>) -> bool {
        self.0.iter().all(|c| c.holds(env))
    }
}

impl Output {
    /// Evaluates the rule: `Ok(None)` when undefined.
    pub(crate) fn eval<'e>(&'e self, env: Env<'e, '_>) -> Result<Option<Val<'e>>, Conflict> {
        let mut found: Option<Val<'e>> = None;
        for def in &self.definitions {
            let Some(v) = def
                .alternatives
                .iter()
                .find(|(body, _)| body.holds(env))
                .and_then(|(_, value)| value.eval(env))
            else {
                continue;
            };
            match &found {
                Some(prev) if !prev.equals(&v) => return Err(Conflict),
                Some(_) => {}
                None => found = Some(v),
            }
        }
        match found {
            Some(v) => Ok(Some(v)),
            None => Ok(self.default.as_ref().and_then(|d| d.eval(env))),
        }
    }

    /// Index keys: for every way the rule can be defined, a path of `input`
    /// and the scalar literals it must equal. `None` when some way is not
    /// pinned so (or there is a default), and the rule must always be tried.
    pub(crate) fn index_keys(&self, paths: &[PathKey]) -> Option<Vec<(PathKey, Vec<Value>)>> {
        if self.default.is_some() || self.definitions.is_empty() {
            return None;
        }
        let mut keys = Vec::new();
        for def in &self.definitions {
            for (body, _) in &def.alternatives {
                keys.push(body.0.iter().find_map(|c| c.pinned(paths))?);
            }
        }
        Some(keys)
    }
}

/// A path of `input` as an index key.
pub(crate) type PathKey = (Root, Box<[Seg]>);

impl Cond {
    /// `path == scalar` or `path in {scalars}`: the path and the literals.
    fn pinned(&self, paths: &[PathKey]) -> Option<(PathKey, Vec<Value>)> {
        let path = |t: &Term| match t {
            Term::Path(local) => paths.get(*local as usize).cloned(),
            _ => None,
        };
        let scalars = |items: &[Value]| {
            items
                .iter()
                .all(|v| !(v.is_array() || v.is_object()))
                .then(|| items.to_vec())
        };
        match self {
            Cond::Cmp(CmpOp::Eq, a, Term::Const(v)) | Cond::Cmp(CmpOp::Eq, Term::Const(v), a) => {
                Some((path(a)?, scalars(std::slice::from_ref(v))?))
            }
            Cond::Member(a, Term::Set(items))
            | Cond::Member(a, Term::Const(Value::Array(items))) => {
                Some((path(a)?, scalars(items)?))
            }
            _ => None,
        }
    }
}

/// Renders a native value as JSON (for outputs such as `redactions`).
pub(crate) fn to_json(v: &Val<'_>) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(Num::Int(i)) => i64::try_from(*i)
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(*i as f64)),
        Val::Num(Num::Float(f)) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Val::Str(s) => Value::String(s.to_string()),
        Val::Array(a) | Val::Set(a) => Value::Array(a.to_vec()),
        Val::Object(o) => Value::Object((*o).clone()),
    }
}
