//! Wire types with the spec's exact JSON names.

mod agent;
mod bundle;
mod request;
mod rule;
mod telemetry;
mod vocab;

pub use agent::{
    AgentAttributes, AgentNoCoverage, BusinessFunction, ModeByOperation, NoCoverageDefaults,
    NoCoverageSettings, NoCoverageValue, resolve_mode,
};
pub use bundle::{
    ActionBundle, ActionBundleRule, BundleRule, RetrievalBundle, RetrievalBundleRule, UnifiedBundle,
};
pub use request::{
    ActionInput, DELEGATE_ACTION, DelegationContext, DelegationInput, RetrievalInput,
};
pub use rule::{Bypass, MaskMode, RedactionDirective, Rule};
pub use telemetry::{
    EvaluationMode, TELEMETRY_BATCH_MAX, TELEMETRY_CONTEXT_MAX_BYTES, TelemetryItem,
};
pub use vocab::{
    ActionClass, AgentMode, Decision, Facet, HitlFallback, ReasonCode, RetrievalOperation,
    TrustTier,
};
