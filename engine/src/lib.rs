//! Warden's decision engine: one library that the sidecar and the control plane
//! both decide with, so a local decision and a server decision are the same code.
//!
//! It is pure: no I/O, no async runtime, no clock of its own (callers pass
//! `now`). It never depends on hyper, axum or a database driver.
//!
//! # Layout
//! - [`model`]: wire types with the spec's exact JSON names (rules, directives,
//!   bundles, agent attributes, settings, telemetry items) and the closed
//!   vocabularies (facets, decisions, reason codes, modes) as enums.
//! - [`dialect`]: compiling a rule's `rego_source` (DESIGN §3) once into a
//!   native condition tree, with regorus as fallback and reference.
//! - [`decide`]: the decision cascade (DESIGN §4) over a [`PolicySet`]: facets,
//!   priority order, pre-filters, no-coverage defaults, tiers, surfaces,
//!   exclusions, emergency bypass, modes, and the unified union.
//! - [`redact`]: redaction directives and the always-on value-shape floor.
//! - [`bundle`]: building the three bundles with stable versions, and loading
//!   a unified bundle into a [`PolicySet`] (dialect checks included).
//! - [`client`]: the fail-closed state machine a sidecar runs (spec §9).
//! - [`classify`]: action classes from verbs; [`glob`]: `action_pattern`.
//!
//! # Not here
//! Request validation against the spec's field limits and error envelopes
//! belongs to the control plane; fetching bundles and reporting telemetry
//! belongs to the proxy.

#![warn(missing_docs)]

pub mod bundle;
pub mod classify;
pub mod client;
pub mod decide;
pub mod dialect;
pub mod glob;
mod input;
pub mod model;
pub mod redact;

pub use decide::{AgentContext, CompiledRule, PolicySet, RuleHit, UnifiedVerdict, Verdict};
pub use dialect::{CompileError, Policy, Runtime, Strategy};
pub use input::regorus_inputs_on_this_thread;
