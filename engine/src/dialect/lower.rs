//! Lowering a parsed module into the native condition tree.
//!
//! Lowering either succeeds for the whole module or reports that some construct
//! is outside the native subset, in which case the rule runs through regorus.
//! It never changes meaning: anything it is unsure of is `Unsupported`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use regorus::unstable::{AssignOp, BoolOp, Expr, Literal, LiteralStmt, Query, Rule, RuleHead};
use serde_json::Value;

use super::native::{Body, Call, CmpOp, Cond, Definition, Output, PathKey, Seg, Term};
use super::value::normalize_set;
use super::{OUTPUT_NAMES, compile_pattern, constant};
use crate::input::Root;

/// A construct outside the native subset (the text says which, for diagnostics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported(pub(crate) String);

type Lowered<T> = Result<T, Unsupported>;

fn unsupported<T>(what: impl Into<String>) -> Lowered<T> {
    Err(Unsupported(what.into()))
}

/// The outputs of a natively lowered rule, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct NativeOutputs {
    /// Every distinct path of `input` the outputs read; `Term::Path` holds a
    /// position in this table.
    pub(crate) paths: Vec<PathKey>,
    pub(crate) decision: Output,
    pub(crate) reason: Output,
    pub(crate) redactions: Output,
    pub(crate) hitl_fallback: Output,
    pub(crate) fail_closed: Output,
}

/// Helper rules may reference each other; Rego forbids recursion, and this
/// bound makes sure a malformed module cannot make lowering loop.
const MAX_HELPER_DEPTH: usize = 8;

/// Rules of one module grouped by name.
pub(crate) struct RuleTable<'m> {
    by_name: HashMap<String, Vec<&'m Rule>>,
}

impl<'m> RuleTable<'m> {
    pub(crate) fn new(rules: &'m [regorus::unstable::Ref<Rule>]) -> RuleTable<'m> {
        let mut by_name: HashMap<String, Vec<&'m Rule>> = HashMap::new();
        for rule in rules {
            let refr = match rule.as_ref() {
                Rule::Spec { head, .. } => match head {
                    RuleHead::Compr { refr, .. }
                    | RuleHead::Set { refr, .. }
                    | RuleHead::Func { refr, .. } => refr,
                },
                Rule::Default { refr, .. } => refr,
            };
            by_name
                .entry(refr.span().text().to_owned())
                .or_default()
                .push(rule.as_ref());
        }
        RuleTable { by_name }
    }

    pub(crate) fn get(&self, name: &str) -> &[&'m Rule] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }
}

/// Lowers the module's output rules.
pub(crate) fn lower_module(table: &RuleTable<'_>) -> Lowered<NativeOutputs> {
    let lowerer = Lowerer::new(table);
    let [d, r, x, h, f] = OUTPUT_NAMES.map(|name| lowerer.output(name, 0));
    Ok(NativeOutputs {
        paths: lowerer.paths.into_inner(),
        decision: d?,
        reason: r?,
        redactions: x?,
        hitl_fallback: h?,
        fail_closed: f?,
    })
}

/// Lowers one complete rule of the module on its own (its paths are not
/// kept: callers only look for constants).
pub(crate) fn lower_output(table: &RuleTable<'_>, name: &str) -> Lowered<Output> {
    Lowerer::new(table).output(name, 0)
}

struct Lowerer<'t, 'm> {
    table: &'t RuleTable<'m>,
    /// The module's distinct `input` paths, numbered in order of appearance.
    paths: RefCell<Vec<PathKey>>,
}

/// Local variables bound by `x := term` inside one body.
#[derive(Clone, Default)]
struct Scope {
    vars: HashMap<String, Term>,
}

impl<'t, 'm> Lowerer<'t, 'm> {
    fn new(table: &'t RuleTable<'m>) -> Lowerer<'t, 'm> {
        Lowerer {
            table,
            paths: RefCell::new(Vec::new()),
        }
    }

    /// The number of `path` in the module's path table.
    fn intern(&self, path: PathKey) -> Lowered<u32> {
        let mut paths = self.paths.borrow_mut();
        let pos = match paths.iter().position(|p| *p == path) {
            Some(pos) => pos,
            None => {
                paths.push(path);
                paths.len() - 1
            }
        };
        u32::try_from(pos).or_else(|_| unsupported("too many paths"))
    }

    /// Lowers every definition of the complete rule `name`.
    fn output(&self, name: &str, depth: usize) -> Lowered<Output> {
        let mut out = Output::default();
        for rule in self.table.get(name) {
            match rule {
                Rule::Default { args, value, .. } => {
                    if !args.is_empty() {
                        return unsupported("default function");
                    }
                    out.default = Some(self.term(value, &Scope::default(), depth)?);
                }
                Rule::Spec { head, bodies, .. } => {
                    let RuleHead::Compr { assign, .. } = head else {
                        return unsupported(format!("`{name}` is not a complete rule"));
                    };
                    let head_value = assign.as_ref().map(|a| &a.value);
                    out.definitions
                        .extend(self.definitions(head_value, bodies, depth)?);
                }
            }
        }
        Ok(out)
    }

    fn definitions(
        &self,
        head_value: Option<&regorus::unstable::Ref<Expr>>,
        bodies: &[regorus::unstable::RuleBody],
        depth: usize,
    ) -> Lowered<Vec<Definition>> {
        let value_of = |scope: &Scope, v: Option<&regorus::unstable::Ref<Expr>>| match v {
            Some(e) => self.term(e, scope, depth),
            None => Ok(Term::Const(Value::Bool(true))),
        };
        if bodies.is_empty() {
            let value = value_of(&Scope::default(), head_value)?;
            return Ok(vec![Definition {
                alternatives: vec![(Body::default(), value)],
            }]);
        }
        let mut defs: Vec<Definition> = Vec::new();
        for b in bodies {
            let mut scope = Scope::default();
            let body = self.query(&b.query, &mut scope, depth)?;
            let value_expr = b.assign.as_ref().map(|a| &a.value).or(head_value);
            let value = value_of(&scope, value_expr)?;
            match defs.last_mut() {
                Some(def) if b.is_else => def.alternatives.push((body, value)),
                _ => defs.push(Definition {
                    alternatives: vec![(body, value)],
                }),
            }
        }
        Ok(defs)
    }

    fn query(&self, q: &Query, scope: &mut Scope, depth: usize) -> Lowered<Body> {
        let mut conds = Vec::with_capacity(q.stmts.len());
        for stmt in &q.stmts {
            conds.push(self.stmt(stmt, scope, depth)?);
        }
        Ok(Body(conds))
    }

    fn stmt(&self, stmt: &LiteralStmt, scope: &mut Scope, depth: usize) -> Lowered<Cond> {
        if !stmt.with_mods.is_empty() {
            return unsupported("`with`");
        }
        match &stmt.literal {
            Literal::Expr { expr, .. } => self.expr_stmt(expr, scope, depth),
            Literal::NotExpr { expr, .. } => {
                // Bindings made under `not` do not escape it.
                let mut inner = scope.clone();
                Ok(Cond::Not(Box::new(
                    self.expr_stmt(expr, &mut inner, depth)?,
                )))
            }
            Literal::SomeVars { .. } | Literal::SomeIn { .. } => unsupported("`some`"),
            Literal::Every { .. } => unsupported("`every`"),
        }
    }

    fn expr_stmt(&self, expr: &Expr, scope: &mut Scope, depth: usize) -> Lowered<Cond> {
        match expr {
            Expr::BoolExpr { op, lhs, rhs, .. } => {
                let op = match op {
                    BoolOp::Eq => CmpOp::Eq,
                    BoolOp::Ne => CmpOp::Ne,
                    BoolOp::Lt => CmpOp::Lt,
                    BoolOp::Le => CmpOp::Le,
                    BoolOp::Gt => CmpOp::Gt,
                    BoolOp::Ge => CmpOp::Ge,
                };
                Ok(Cond::Cmp(
                    op,
                    self.term(lhs, scope, depth)?,
                    self.term(rhs, scope, depth)?,
                ))
            }
            Expr::AssignExpr { op, lhs, rhs, .. } => {
                let fresh = match lhs.as_ref() {
                    Expr::Var { span, .. } => {
                        let name = span.text();
                        (name != "_"
                            && !scope.vars.contains_key(name)
                            && self.table.get(name).is_empty()
                            && name != "input"
                            && name != "data")
                            .then(|| name.to_owned())
                    }
                    _ => None,
                };
                match (op, fresh) {
                    (_, Some(name)) => {
                        let t = self.term(rhs, scope, depth)?;
                        scope.vars.insert(name, t.clone());
                        Ok(Cond::Defined(t))
                    }
                    // `a = b` between two known terms is an equality test.
                    (AssignOp::Eq, None) => Ok(Cond::Cmp(
                        CmpOp::Eq,
                        self.term(lhs, scope, depth)?,
                        self.term(rhs, scope, depth)?,
                    )),
                    (AssignOp::ColEq, None) => unsupported("`:=` to a bound name"),
                }
            }
            Expr::Membership {
                key: None,
                value,
                collection,
                ..
            } => Ok(Cond::Member(
                self.term(value, scope, depth)?,
                self.term(collection, scope, depth)?,
            )),
            Expr::Membership { key: Some(_), .. } => unsupported("`k, v in`"),
            Expr::Var { span, .. } if !scope.vars.contains_key(span.text()) => {
                self.helper_cond(span.text(), depth)
            }
            other => Ok(Cond::Truthy(self.term(other, scope, depth)?)),
        }
    }

    /// A bare reference to a rule of the module used as a condition.
    fn helper_cond(&self, name: &str, depth: usize) -> Lowered<Cond> {
        if depth >= MAX_HELPER_DEPTH {
            return unsupported("helper rules nested too deep");
        }
        if self.table.get(name).is_empty() {
            return unsupported(format!("reference to `{name}`"));
        }
        let helper = self.output(name, depth + 1)?;
        if helper.default.is_some() {
            return unsupported("helper rule with a default");
        }
        // A helper whose every definition yields `true` is the union of its bodies.
        let mut bodies = Vec::new();
        for def in helper.definitions {
            for (body, value) in def.alternatives {
                match value {
                    Term::Const(Value::Bool(true)) => bodies.push(body),
                    _ => return unsupported("non-boolean helper used as a condition"),
                }
            }
        }
        Ok(Cond::AnyOf(Arc::from(bodies)))
    }

    fn term(&self, expr: &Expr, scope: &Scope, depth: usize) -> Lowered<Term> {
        match expr {
            Expr::String { value, .. }
            | Expr::RawString { value, .. }
            | Expr::Number { value, .. }
            | Expr::Bool { value, .. }
            | Expr::Null { value, .. } => Ok(Term::Const(const_json(value)?)),
            Expr::Var { span, .. } => {
                let name = span.text();
                if let Some(t) = scope.vars.get(name) {
                    return Ok(t.clone());
                }
                self.constant_rule(name, depth)
            }
            Expr::RefDot { .. } | Expr::RefBrack { .. } => self.path(expr),
            Expr::Array { items, .. } => {
                let vals = items
                    .iter()
                    .map(|i| self.const_item(i, scope, depth))
                    .collect::<Lowered<Vec<_>>>()?;
                Ok(Term::Const(Value::Array(vals)))
            }
            Expr::Set { items, .. } => {
                let mut vals = items
                    .iter()
                    .map(|i| self.const_item(i, scope, depth))
                    .collect::<Lowered<Vec<_>>>()?;
                normalize_set(&mut vals);
                Ok(Term::Set(vals))
            }
            Expr::Object { fields, .. } => {
                let mut map = serde_json::Map::new();
                for (_, k, v) in fields {
                    let Value::String(key) = self.const_item(k, scope, depth)? else {
                        return unsupported("non-string object key");
                    };
                    map.insert(key, self.const_item(v, scope, depth)?);
                }
                Ok(Term::Const(Value::Object(map)))
            }
            Expr::Call { fcn, params, .. } => self.call(fcn.span().text(), params, scope, depth),
            _ => unsupported("expression form"),
        }
    }

    /// A literal inside a collection literal; sets are not JSON, so none nest.
    fn const_item(&self, expr: &Expr, scope: &Scope, depth: usize) -> Lowered<Value> {
        match self.term(expr, scope, depth)? {
            Term::Const(v) => Ok(v),
            _ => unsupported("non-constant collection item"),
        }
    }

    /// A rule of the module used as a value: only constants inline.
    fn constant_rule(&self, name: &str, depth: usize) -> Lowered<Term> {
        if depth >= MAX_HELPER_DEPTH || self.table.get(name).is_empty() {
            return unsupported(format!("reference to `{name}`"));
        }
        match constant(&self.output(name, depth + 1)?) {
            Some(v) => Ok(Term::Const(v.clone())),
            None => unsupported("conditional value rule"),
        }
    }

    fn path(&self, expr: &Expr) -> Lowered<Term> {
        let mut segs = Vec::new();
        let mut cur = expr;
        loop {
            match cur {
                Expr::RefDot { refr, field, .. } => {
                    segs.push(Seg::Key(field.1.as_string().map_err(no)?.as_ref().into()));
                    cur = refr;
                }
                Expr::RefBrack { refr, index, .. } => {
                    segs.push(match index.as_ref() {
                        Expr::String { value, .. } | Expr::RawString { value, .. } => {
                            Seg::Key(value.as_string().map_err(no)?.as_ref().into())
                        }
                        Expr::Number { value, .. } => {
                            let n = value.as_u64().map_err(no)?;
                            Seg::Index(usize::try_from(n).map_err(no)?)
                        }
                        _ => return unsupported("computed index"),
                    });
                    cur = refr;
                }
                Expr::Var { span, .. } if span.text() == "input" => break,
                _ => return unsupported("reference outside `input`"),
            }
        }
        segs.reverse();
        let mut segs = segs.into_iter();
        let root = match segs.next() {
            Some(Seg::Key(k)) => Root::parse(&k),
            _ => return unsupported("whole-input or indexed-input reference"),
        };
        Ok(Term::Path(self.intern((root, segs.collect()))?))
    }

    fn call(
        &self,
        name: &str,
        params: &[regorus::unstable::Ref<Expr>],
        scope: &Scope,
        depth: usize,
    ) -> Lowered<Term> {
        let arg = |i: usize| self.term(&params[i], scope, depth);
        let call = match (name, params.len()) {
            ("startswith", 2) => Call::StartsWith(arg(0)?, arg(1)?),
            ("endswith", 2) => Call::EndsWith(arg(0)?, arg(1)?),
            ("contains", 2) => Call::Contains(arg(0)?, arg(1)?),
            ("count", 1) => Call::Count(arg(0)?),
            ("lower", 1) => Call::Lower(arg(0)?),
            ("upper", 1) => Call::Upper(arg(0)?),
            ("regex.match", 2) => {
                let Term::Const(Value::String(p)) = arg(0)? else {
                    return unsupported("regex.match with a computed pattern");
                };
                // A pattern the regex crate rejects is undefined at run time in
                // regorus; only the fallback reproduces that faithfully.
                let re = compile_pattern(&p).map_err(|_| Unsupported("bad regex".into()))?;
                Call::RegexMatch(Arc::new(re), arg(1)?)
            }
            _ => return unsupported(format!("call to `{name}`")),
        };
        Ok(Term::Call(Box::new(call)))
    }
}

fn no<E>(_: E) -> Unsupported {
    Unsupported("literal form".into())
}

fn const_json(v: &regorus::Value) -> Lowered<Value> {
    serde_json::to_value(v).map_err(no)
}
