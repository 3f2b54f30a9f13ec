//! The regorus path, for rules outside the native subset.
//!
//! The module is added to one engine and prepared once at compile time (which
//! also surfaces semantic errors). Each worker thread evaluates on its own clone
//! of that engine, made on first use: no lock is shared between threads.

use std::cell::RefCell;

use regorus::{Engine, PolicyLengthConfig, Value};
use thread_local::ThreadLocal;

use super::lower::RuleTable;
use super::{
    CompileError, EvalError, MAX_COLUMN, MAX_LINES, OUTPUT_NAMES, RawOutputs, SOURCE_NAME,
};
use crate::input::InputDoc;

pub(crate) struct RegoProgram {
    template: Engine,
    /// `data.<package>.<output>` for each output the module defines.
    queries: [Option<String>; 5],
    per_thread: ThreadLocal<RefCell<Engine>>,
}

impl RegoProgram {
    pub(crate) fn prepare(
        source: &str,
        table: &RuleTable<'_>,
    ) -> Result<RegoProgram, CompileError> {
        let mut engine = Engine::new();
        engine.set_policy_length_config(PolicyLengthConfig {
            max_col: MAX_COLUMN,
            max_lines: MAX_LINES,
            ..PolicyLengthConfig::default()
        });
        // OPA's default: a builtin given the wrong types is undefined, not an error.
        engine.set_strict_builtin_errors(false);
        let package = engine
            .add_policy(SOURCE_NAME.to_owned(), source.to_owned())
            .map_err(|e| CompileError::from_regorus(&e))?;
        let queries = OUTPUT_NAMES
            .map(|name| (!table.get(name).is_empty()).then(|| format!("{package}.{name}")));
        // Prepare (semantic analysis: unsafe variables, unknown functions, rule
        // conflicts that hold for every input) without evaluating: an output
        // conflict that depends on the input is a run-time matter, not a
        // compile error.
        let decision = queries[0]
            .clone()
            .expect("checked: the module defines decision");
        engine
            .compile_with_entrypoint(&decision.as_str().into())
            .map_err(|e| CompileError::from_regorus(&e))?;
        Ok(RegoProgram {
            template: engine,
            queries,
            per_thread: ThreadLocal::new(),
        })
    }

    pub(crate) fn evaluate(&self, doc: &InputDoc<'_>) -> Result<Option<RawOutputs>, EvalError> {
        let cell = self
            .per_thread
            .get_or(|| RefCell::new(self.template.clone()));
        let mut engine = cell.borrow_mut();
        engine.set_input(doc.regorus_value().clone());
        let mut eval = |i: usize| -> Result<Option<serde_json::Value>, EvalError> {
            let Some(query) = &self.queries[i] else {
                return Ok(None);
            };
            let v = engine
                .eval_rule(query.clone())
                .map_err(|e| EvalError(format!("{e:#}")))?;
            if v == Value::Undefined {
                return Ok(None);
            }
            serde_json::to_value(&v)
                .map(Some)
                .map_err(|e| EvalError(e.to_string()))
        };
        let Some(decision) = eval(0)? else {
            return Ok(None);
        };
        Ok(Some(RawOutputs {
            decision,
            reason: eval(1)?,
            redactions: eval(2)?,
            hitl_fallback: eval(3)?,
            fail_closed: eval(4)?,
        }))
    }
}
