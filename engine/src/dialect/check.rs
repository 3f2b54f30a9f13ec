//! Static checks of a parsed module against the dialect (DESIGN §3).
//!
//! Every `decision` must be a string literal in the vocabulary of every facet the
//! rule applies to, so that a bad decision is a 400 at create time and never a
//! surprise at run time. `hitl_fallback` and `fail_closed` must be literals of
//! their types; a constant `redactions` must be valid directives.

use std::sync::Arc;

use regorus::unstable::{Expr, Module, Rule, RuleHead};

use super::lower::{RuleTable, lower_output};
use super::{CompileError, constant};
use crate::model::{Decision, Facet};
use crate::redact::RedactionSet;

pub(crate) struct Checked {
    pub(crate) effect: Decision,
    pub(crate) static_redactions: Option<Arc<RedactionSet>>,
}

pub(crate) fn check(
    module: &Module,
    table: &RuleTable<'_>,
    facets: &[Facet],
) -> Result<Checked, CompileError> {
    if facets.is_empty() {
        return Err(CompileError::at(1, 1, "the rule applies to no facet"));
    }
    let decisions = table.get("decision");
    if decisions.is_empty() {
        let s = module.package.span.clone();
        return Err(CompileError::at(
            s.line,
            s.col,
            "the policy defines no `decision` (write `decision := \"deny\" if { … }`)",
        ));
    }
    let mut effect: Option<Decision> = None;
    for value in output_values(decisions, "decision")? {
        let d = decision_literal(value, facets)?;
        if effect.is_none_or(|e| d.restrictiveness() > e.restrictiveness()) {
            effect = Some(d);
        }
    }
    for value in output_values(table.get("hitl_fallback"), "hitl_fallback")? {
        match value {
            Some(e) if matches!(string_literal(e), Some("deny" | "mask")) => {}
            _ => {
                return Err(at(
                    value,
                    "hitl_fallback must be the literal \"deny\" or \"mask\"",
                ));
            }
        }
    }
    for value in output_values(table.get("fail_closed"), "fail_closed")? {
        // A bare `fail_closed if { … }` has the value true.
        if let Some(e) = value
            && !matches!(e, Expr::Bool { .. })
        {
            return Err(at(value, "fail_closed must be the literal true or false"));
        }
    }
    let static_redactions = match lower_output(table, "redactions")
        .ok()
        .as_ref()
        .and_then(constant)
    {
        None => None,
        Some(v) => {
            let set = RedactionSet::from_json(v.clone()).map_err(|e| {
                let span = table.get("redactions").first().map(|r| r.span().clone());
                let (line, col) = span.map_or((1, 1), |s| (s.line, s.col));
                CompileError::at(line, col, format!("redactions: {e}"))
            })?;
            Some(Arc::new(set))
        }
    };
    Ok(Checked {
        effect: effect.expect("at least one decision value was checked"),
        static_redactions,
    })
}

/// Every value expression of a complete rule (`None` = the implicit `true`).
fn output_values<'m>(
    rules: &[&'m Rule],
    name: &str,
) -> Result<Vec<Option<&'m Expr>>, CompileError> {
    let mut values = Vec::new();
    for rule in rules {
        match rule {
            Rule::Default {
                value, args, span, ..
            } => {
                if !args.is_empty() {
                    return Err(CompileError::at(
                        span.line,
                        span.col,
                        format!("`{name}` cannot be a function"),
                    ));
                }
                values.push(Some(value.as_ref()));
            }
            Rule::Spec { head, bodies, span } => {
                let RuleHead::Compr { assign, .. } = head else {
                    return Err(CompileError::at(
                        span.line,
                        span.col,
                        format!("`{name}` must be a single value (`{name} := … if {{ … }}`)"),
                    ));
                };
                let head_value = assign.as_ref().map(|a| a.value.as_ref());
                if bodies.is_empty() {
                    values.push(head_value);
                }
                for b in bodies {
                    values.push(b.assign.as_ref().map(|a| a.value.as_ref()).or(head_value));
                }
            }
        }
    }
    Ok(values)
}

fn decision_literal(value: Option<&Expr>, facets: &[Facet]) -> Result<Decision, CompileError> {
    let Some(word) = value.and_then(string_literal) else {
        return Err(at(
            value,
            "decision must be a string literal such as \"deny\"",
        ));
    };
    let Some(decision) = Decision::parse(word) else {
        return Err(at(value, format!("unknown decision \"{word}\"")));
    };
    for facet in facets {
        if !facet.allows(decision) {
            let allowed: Vec<_> = facet.vocabulary().iter().map(|d| d.as_str()).collect();
            return Err(at(
                value,
                format!(
                    "decision \"{word}\" is not valid for the {facet} facet (allowed: {})",
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(decision)
}

fn string_literal(e: &Expr) -> Option<&str> {
    match e {
        Expr::String { value, .. } | Expr::RawString { value, .. } => {
            value.as_string().ok().map(|s| s.as_ref())
        }
        _ => None,
    }
}

fn at(value: Option<&Expr>, message: impl Into<String>) -> CompileError {
    let (line, col) = value.map_or((1, 1), |e| (e.span().line, e.span().col));
    CompileError::at(line, col, message)
}
