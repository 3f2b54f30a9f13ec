//! The regorus path, for rules outside the native subset.
//!
//! The module is added to one engine and prepared once at compile time (which
//! also surfaces semantic errors), then compiled to regorus's RVM bytecode
//! when the RVM compiler accepts it; otherwise it runs on the interpreter.
//! Each worker thread evaluates on its own VM (or engine clone), made on first
//! use: no lock is shared between threads.

use std::cell::RefCell;
use std::sync::Arc;

use regorus::languages::rego::compiler::Compiler;
use regorus::rvm::Program;
use regorus::rvm::vm::RegoVM;
use regorus::{CompiledPolicy, Engine, PolicyLengthConfig, Value};
use thread_local::ThreadLocal;

use super::lower::RuleTable;
use super::{
    CompileError, EvalError, MAX_COLUMN, MAX_LINES, OUTPUT_NAMES, RawOutputs, SOURCE_NAME,
};
use crate::input::InputDoc;

/// How many RVM instructions one output may execute before the evaluation
/// fails (closed). Generous for any rule over a request of the sizes the
/// sidecar accepts; it only stops a runaway loop.
const MAX_RVM_INSTRUCTIONS: usize = 1_000_000;

/// Which regorus machine runs the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Machine {
    /// RVM bytecode when the module compiles to it, else the interpreter.
    PreferRvm,
    /// The interpreter: the reference semantics.
    Interpreter,
}

pub(crate) struct RegoProgram {
    /// `data.<package>.<output>` for each output the module defines.
    queries: [Option<String>; 5],
    runner: Runner,
}

enum Runner {
    Rvm {
        program: Arc<Program>,
        policy: CompiledPolicy,
        per_thread: ThreadLocal<RefCell<RegoVM>>,
    },
    Interpreter {
        template: Box<Engine>,
        per_thread: ThreadLocal<RefCell<Engine>>,
    },
}

impl RegoProgram {
    pub(crate) fn prepare(
        source: &str,
        table: &RuleTable<'_>,
        machine: Machine,
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
        let policy = engine
            .compile_with_entrypoint(&decision.as_str().into())
            .map_err(|e| CompileError::from_regorus(&e))?;
        let entry_points: Vec<&str> = queries.iter().flatten().map(String::as_str).collect();
        let program = match machine {
            Machine::PreferRvm => Compiler::compile_from_policy(&policy, &entry_points).ok(),
            Machine::Interpreter => None,
        };
        let runner = match program {
            Some(program) => Runner::Rvm {
                program,
                policy,
                per_thread: ThreadLocal::new(),
            },
            None => Runner::Interpreter {
                template: Box::new(engine),
                per_thread: ThreadLocal::new(),
            },
        };
        Ok(RegoProgram { queries, runner })
    }

    /// Whether the rule runs as RVM bytecode (else on the interpreter).
    pub(crate) fn is_rvm(&self) -> bool {
        matches!(self.runner, Runner::Rvm { .. })
    }

    pub(crate) fn evaluate(&self, doc: &InputDoc<'_>) -> Result<Option<RawOutputs>, EvalError> {
        let input = doc.regorus_value().clone();
        match &self.runner {
            Runner::Rvm {
                program,
                policy,
                per_thread,
            } => {
                let cell = per_thread.get_or(|| {
                    let mut vm = RegoVM::new_with_policy(policy.clone());
                    vm.load_program(program.clone());
                    vm.set_max_instructions(MAX_RVM_INSTRUCTIONS);
                    RefCell::new(vm)
                });
                let mut vm = cell.borrow_mut();
                vm.set_input(input);
                self.outputs(|query| {
                    vm.execute_entry_point_by_name(query)
                        .map_err(|e| EvalError(e.to_string()))
                })
            }
            Runner::Interpreter {
                template,
                per_thread,
            } => {
                let cell = per_thread.get_or(|| RefCell::new(template.as_ref().clone()));
                let mut engine = cell.borrow_mut();
                engine.set_input(input);
                self.outputs(|query| {
                    engine
                        .eval_rule(query.to_owned())
                        .map_err(|e| EvalError(format!("{e:#}")))
                })
            }
        }
    }

    /// Evaluates `decision`, then (if it is defined) the other outputs.
    fn outputs(
        &self,
        mut eval: impl FnMut(&str) -> Result<Value, EvalError>,
    ) -> Result<Option<RawOutputs>, EvalError> {
        let mut output = |i: usize| -> Result<Option<serde_json::Value>, EvalError> {
            let Some(query) = &self.queries[i] else {
                return Ok(None);
            };
            let v = eval(query)?;
            if v == Value::Undefined {
                return Ok(None);
            }
            serde_json::to_value(&v)
                .map(Some)
                .map_err(|e| EvalError(e.to_string()))
        };
        let Some(decision) = output(0)? else {
            return Ok(None);
        };
        Ok(Some(RawOutputs {
            decision,
            reason: output(1)?,
            redactions: output(2)?,
            hitl_fallback: output(3)?,
            fail_closed: output(4)?,
        }))
    }
}
