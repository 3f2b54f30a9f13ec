//! The rule dialect (DESIGN §3): compiling `rego_source` once, evaluating it fast.
//!
//! [`Policy::compile`] parses the module with regorus's parser, checks it
//! (decision literals within the facets' vocabularies, output types, semantic
//! errors regorus reports), derives the rule's effect, and lowers it into a
//! native condition tree ([`native`]). A module that uses anything outside the
//! native subset keeps a prepared regorus engine instead, cloned once per
//! worker thread ([`fallback`]). regorus stays the reference semantics: the
//! differential test holds the native path to its answers.

mod check;
mod fallback;
pub(crate) mod lower;
pub(crate) mod native;
pub(crate) mod value;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use regorus::unstable::Parser;
use serde::{Deserialize, Serialize};

use crate::input::InputDoc;
use crate::model::{Decision, Facet, HitlFallback};
use crate::redact::RedactionSet;
use native::{Output, Term};

/// The longest `rego_source` the spec accepts (spec 2.3).
pub const MAX_SOURCE_CHARS: usize = 100_000;
/// The longest regular expression a rule or directive may use.
pub const MAX_PATTERN_CHARS: usize = 1_000;
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const REGEX_NEST_LIMIT: u32 = 64;

/// The names of the module's values the engine reads (DESIGN §3), in the order
/// [`lower::NativeOutputs`] holds them.
pub(crate) const OUTPUT_NAMES: [&str; 5] = [
    "decision",
    "reason",
    "redactions",
    "hitl_fallback",
    "fail_closed",
];

/// Compiles a pattern within the engine's size and nesting bounds.
pub(crate) fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(format!(
            "pattern is longer than {MAX_PATTERN_CHARS} characters"
        ));
    }
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .nest_limit(REGEX_NEST_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// Why a rule's source was refused, with its position (1-based) when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct CompileError {
    /// What is wrong.
    pub message: String,
    /// 1-based line of the offending construct.
    pub line: u32,
    /// 1-based column of the offending construct.
    pub column: u32,
}

impl CompileError {
    pub(crate) fn at(line: u32, column: u32, message: impl Into<String>) -> CompileError {
        CompileError {
            message: message.into(),
            line,
            column,
        }
    }

    /// Reads the position out of a regorus diagnostic (`--> file:LINE:COL … error: MSG`).
    pub(crate) fn from_regorus(err: &dyn std::fmt::Display) -> CompileError {
        let text = err.to_string();
        let (mut line, mut column) = (1, 1);
        if let Some(rest) = text.split("--> ").nth(1) {
            let mut nums = rest
                .lines()
                .next()
                .unwrap_or("")
                .rsplitn(3, ':')
                .map(|s| s.trim().parse::<u32>().ok());
            if let (Some(Some(c)), Some(Some(l))) = (nums.next(), nums.next()) {
                (line, column) = (l, c);
            }
        }
        let message = text
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix("error: "))
            .unwrap_or_else(|| text.trim())
            .to_owned();
        CompileError::at(line, column, message)
    }
}

/// How to compile a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Native where the subset allows it, else regorus's RVM bytecode where
    /// the rule compiles to it, else the regorus interpreter (the default).
    PreferNative,
    /// Never native: RVM bytecode where the rule compiles to it, else the
    /// interpreter (for differential tests and benchmarks of the fallback).
    PreferRvm,
    /// Always the regorus interpreter: the reference, for differential tests
    /// and diagnosis.
    RegorusOnly,
}

/// What a compiled policy runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// The native condition tree.
    Native,
    /// regorus's RVM bytecode.
    Rvm,
    /// The regorus interpreter.
    Interpreter,
}

/// A compiled `rego_source`.
pub struct Policy {
    effect: Decision,
    program: Program,
    /// `redactions` when it is a constant of the module, compiled once.
    static_redactions: Option<Arc<RedactionSet>>,
}

enum Program {
    Native(Box<lower::NativeOutputs>),
    Rego(Box<fallback::RegoProgram>),
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("effect", &self.effect)
            .field("runtime", &self.runtime())
            .finish_non_exhaustive()
    }
}

/// What a matched rule asks for.
#[derive(Debug, Clone)]
pub(crate) struct Matched {
    pub(crate) decision: Decision,
    pub(crate) reason: Option<String>,
    pub(crate) redactions: Option<Arc<RedactionSet>>,
    pub(crate) hitl_fallback: Option<HitlFallback>,
    pub(crate) fail_closed: bool,
}

/// A rule that could not be evaluated on this input; the caller fails closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvalError(pub(crate) String);

impl Policy {
    /// Parses, checks and compiles `source` for a rule applying to `facets`.
    pub fn compile(source: &str, facets: &[Facet]) -> Result<Policy, CompileError> {
        Policy::compile_with(source, facets, Strategy::PreferNative)
    }

    /// As [`Policy::compile`], choosing how the policy will run.
    pub fn compile_with(
        source: &str,
        facets: &[Facet],
        strategy: Strategy,
    ) -> Result<Policy, CompileError> {
        let chars = source.chars().count();
        if chars == 0 || chars > MAX_SOURCE_CHARS {
            return Err(CompileError::at(
                1,
                1,
                format!("rego_source must be 1 to {MAX_SOURCE_CHARS} characters, got {chars}"),
            ));
        }
        let module = parse(source)?;
        let table = lower::RuleTable::new(&module.policy);
        let checked = check::check(&module, &table, facets)?;
        // Semantic errors (unsafe variables, unknown functions, type errors in
        // constants) are found by preparing the module in regorus once.
        // A native rule still goes through regorus once, for that check.
        let native = match strategy {
            Strategy::PreferNative => lower::lower_module(&table).ok(),
            Strategy::PreferRvm | Strategy::RegorusOnly => None,
        };
        let machine = match strategy {
            Strategy::RegorusOnly => fallback::Machine::Interpreter,
            _ if native.is_some() => fallback::Machine::Interpreter,
            Strategy::PreferNative | Strategy::PreferRvm => fallback::Machine::PreferRvm,
        };
        let rego = fallback::RegoProgram::prepare(source, &table, machine)?;
        let program = match native {
            Some(outputs) => Program::Native(Box::new(outputs)),
            None => Program::Rego(Box::new(rego)),
        };
        Ok(Policy {
            effect: checked.effect,
            program,
            static_redactions: checked.static_redactions,
        })
    }

    /// The rule's effect, derived from its `decision` literals (the most
    /// restrictive of them).
    pub fn effect(&self) -> Decision {
        self.effect
    }

    /// Whether the policy runs natively (else through regorus).
    pub fn is_native(&self) -> bool {
        matches!(self.program, Program::Native(_))
    }

    /// What the policy runs on.
    pub fn runtime(&self) -> Runtime {
        match &self.program {
            Program::Native(_) => Runtime::Native,
            Program::Rego(rego) if rego.is_rvm() => Runtime::Rvm,
            Program::Rego(_) => Runtime::Interpreter,
        }
    }

    /// The rule's index keys (see `native::Output::index_keys`): the rule can
    /// only match a request whose value at one of the paths equals one of
    /// that path's literals. `None` for rules that must always be tried.
    pub(crate) fn index_keys(&self) -> Option<Vec<(native::PathKey, Vec<serde_json::Value>)>> {
        match &self.program {
            Program::Native(out) => out.decision.index_keys(&out.paths),
            Program::Rego(_) => None,
        }
    }

    /// The distinct paths of `input` the native program reads (none for a
    /// regorus program). [`Policy::evaluate`] takes, for each, its slot in
    /// the request's path cache.
    pub(crate) fn paths(&self) -> &[native::PathKey] {
        match &self.program {
            Program::Native(out) => &out.paths,
            Program::Rego(_) => &[],
        }
    }

    /// Every body that can define `decision` (all alternatives of all
    /// definitions): the rule can only match when one of them holds. `None`
    /// when that cannot be said (a regorus program, or a `default decision`).
    pub(crate) fn decision_bodies(&self) -> Option<Vec<&native::Body>> {
        match &self.program {
            Program::Native(out) if out.decision.default.is_none() => Some(
                out.decision
                    .definitions
                    .iter()
                    .flat_map(|d| d.alternatives.iter().map(|(body, _)| body))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Evaluates the policy: `Ok(None)` when the rule does not match.
    /// `slots[i]` is where `self.paths()[i]` is cached in `doc`.
    pub(crate) fn evaluate(
        &self,
        doc: &InputDoc<'_>,
        slots: &[u32],
    ) -> Result<Option<Matched>, EvalError> {
        match &self.program {
            Program::Native(out) => self.evaluate_native(
                out,
                native::Env {
                    doc,
                    paths: &out.paths,
                    slots,
                },
            ),
            Program::Rego(rego) => {
                let raw = rego.evaluate(doc)?;
                raw.map(|r| self.interpret(r)).transpose()
            }
        }
    }

    fn evaluate_native(
        &self,
        out: &lower::NativeOutputs,
        env: native::Env<'_, '_>,
    ) -> Result<Option<Matched>, EvalError> {
        let conflict = |name: &str| EvalError(format!("`{name}` produced conflicting values"));
        let Some(decision) = out.decision.eval(env).map_err(|_| conflict("decision"))? else {
            return Ok(None);
        };
        let json = |o: &Output, name: &str| -> Result<Option<serde_json::Value>, EvalError> {
            Ok(o.eval(env)
                .map_err(|_| conflict(name))?
                .map(|v| native::to_json(&v)))
        };
        let raw = RawOutputs {
            decision: native::to_json(&decision),
            reason: json(&out.reason, "reason")?,
            redactions: if self.static_redactions.is_some() {
                None
            } else {
                json(&out.redactions, "redactions")?
            },
            hitl_fallback: json(&out.hitl_fallback, "hitl_fallback")?,
            fail_closed: json(&out.fail_closed, "fail_closed")?,
        };
        self.interpret(raw).map(Some)
    }

    /// Turns the module's raw values into typed outputs.
    fn interpret(&self, raw: RawOutputs) -> Result<Matched, EvalError> {
        let decision = raw
            .decision
            .as_str()
            .and_then(Decision::parse)
            .ok_or_else(|| EvalError(format!("decision {} is not a decision", raw.decision)))?;
        let redactions = match (&self.static_redactions, raw.redactions) {
            (Some(set), _) => Some(set.clone()),
            (None, None) => None,
            (None, Some(v)) => Some(Arc::new(
                RedactionSet::from_json(v).map_err(|e| EvalError(e.to_string()))?,
            )),
        };
        let hitl_fallback = match raw.hitl_fallback {
            None => None,
            Some(v) => Some(
                serde_json::from_value(v)
                    .map_err(|_| EvalError("hitl_fallback must be \"deny\" or \"mask\"".into()))?,
            ),
        };
        let fail_closed = match raw.fail_closed {
            None => false,
            Some(serde_json::Value::Bool(b)) => b,
            Some(_) => return Err(EvalError("fail_closed must be a boolean".into())),
        };
        let reason = raw.reason.map(|r| match r {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        });
        Ok(Matched {
            decision,
            reason,
            redactions,
            hitl_fallback,
            fail_closed,
        })
    }
}

/// The module's values as JSON, before they are typed.
pub(crate) struct RawOutputs {
    pub(crate) decision: serde_json::Value,
    pub(crate) reason: Option<serde_json::Value>,
    pub(crate) redactions: Option<serde_json::Value>,
    pub(crate) hitl_fallback: Option<serde_json::Value>,
    pub(crate) fail_closed: Option<serde_json::Value>,
}

/// The column limit handed to regorus: wide enough for a one-line source of
/// the largest size the spec accepts.
pub(crate) const MAX_COLUMN: NonZeroU32 = NonZeroU32::new(MAX_SOURCE_CHARS as u32 + 1).unwrap();
pub(crate) const MAX_LINES: NonZeroUsize = NonZeroUsize::new(MAX_SOURCE_CHARS + 1).unwrap();
pub(crate) const SOURCE_NAME: &str = "rule.rego";

fn parse(source: &str) -> Result<regorus::unstable::Module, CompileError> {
    let src = regorus::Source::from_contents_with_limits(
        SOURCE_NAME.to_owned(),
        source.to_owned(),
        NonZeroUsize::new(MAX_SOURCE_CHARS * 4 + 1).unwrap(),
        MAX_LINES,
    )
    .map_err(|e| CompileError::from_regorus(&e))?;
    let mut parser = Parser::new(&src).map_err(|e| CompileError::from_regorus(&e))?;
    parser.set_max_col(MAX_COLUMN);
    parser
        .enable_rego_v1()
        .map_err(|e| CompileError::from_regorus(&e))?;
    parser.parse().map_err(|e| CompileError::from_regorus(&e))
}

/// A term that is a constant of the module, if it is one.
pub(crate) fn constant(out: &Output) -> Option<&serde_json::Value> {
    match (out.definitions.as_slice(), &out.default) {
        ([def], None) => match def.alternatives.as_slice() {
            [(body, Term::Const(v))] if body.0.is_empty() => Some(v),
            _ => None,
        },
        ([], Some(Term::Const(v))) => Some(v),
        _ => None,
    }
}
