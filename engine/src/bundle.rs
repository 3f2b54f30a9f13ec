//! Bundles (spec 2.12): building them with stable versions, loading them.
//!
//! A bundle's `version` is the SHA-256 (lower-case hex) of the canonical JSON
//! of the bundle without its `version` field: object keys sorted by code
//! point, no insignificant white space, numbers as serde_json writes them.
//! It is the same on every run and platform and changes whenever a rule, the
//! agent's mode or attributes, or the no-coverage settings change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::decide::{AgentContext, CompiledRule, PolicySet};
use crate::dialect::CompileError;
use crate::model::{
    ActionBundle, ActionBundleRule, AgentAttributes, AgentMode, AgentNoCoverage, BundleRule, Facet,
    ModeByOperation, NoCoverageDefaults, NoCoverageSettings, RetrievalBundle, RetrievalBundleRule,
    UnifiedBundle,
};

/// The dialect this engine speaks. A bundle whose `min_dialect` is above it
/// is refused.
pub const DIALECT_VERSION: u32 = 1;
/// The oldest dialect that can run the bundles this engine builds.
pub const MIN_DIALECT: u32 = 1;

/// Why a bundle cannot be run. A client that gets one fails closed (spec §9).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bundle is not JSON of the unified bundle's shape, or names a facet,
    /// decision or mode this engine does not know (must-understand).
    #[error("bundle not understood: {0}")]
    NotUnderstood(String),
    /// The bundle needs a newer dialect.
    #[error("bundle needs dialect {min_dialect}, this engine speaks {DIALECT_VERSION}")]
    TooNew {
        /// The bundle's `min_dialect`.
        min_dialect: u32,
    },
    /// The content does not hash to the announced version.
    #[error("bundle version {announced} does not match its content ({actual})")]
    VersionMismatch {
        /// The `version` field.
        announced: String,
        /// The hash of the content.
        actual: String,
    },
    /// A rule does not compile under this engine's dialect.
    #[error("rule {rule_code} does not compile: {error}")]
    Rule {
        /// The rule's code.
        rule_code: String,
        /// Why.
        error: CompileError,
    },
}

/// Everything a unified bundle is built from.
#[derive(Debug, Clone)]
pub struct BundleSource<'a> {
    /// The agent.
    pub agent_id: &'a str,
    /// The agent's resolved mode.
    pub agent_mode: AgentMode,
    /// Per-operation overrides.
    pub mode_by_operation: &'a ModeByOperation,
    /// Attributes (`input.agent`).
    pub attributes: &'a AgentAttributes,
    /// Whether cognition capture is on.
    pub cognition_capture: bool,
    /// The organization's rules; disabled ones must already be left out.
    pub rules: &'a [BundleRule],
    /// No-coverage settings.
    pub no_coverage: &'a NoCoverageSettings,
}

/// Builds the unified bundle, rules in cascade order.
pub fn unified(src: &BundleSource<'_>) -> UnifiedBundle {
    let mut rules = src.rules.to_vec();
    sort_rules(&mut rules);
    let mut bundle = UnifiedBundle {
        version: String::new(),
        dialect_version: DIALECT_VERSION,
        min_dialect: MIN_DIALECT,
        agent_id: src.agent_id.to_owned(),
        agent_mode: src.agent_mode,
        mode_by_operation: src.mode_by_operation.clone(),
        cognition_capture: src.cognition_capture,
        agent_attributes: src.attributes.clone(),
        rules,
        no_coverage: src.no_coverage.clone(),
    };
    bundle.version = version_of(&bundle);
    bundle
}

/// The bundle a shut-down agent receives: enforce mode, no rules, every
/// uncovered action denied (spec 4.1).
pub fn terminal(agent_id: &str) -> UnifiedBundle {
    let attributes = AgentAttributes {
        no_coverage: Some(AgentNoCoverage::Closed),
        ..AgentAttributes::default()
    };
    let no_coverage = NoCoverageSettings {
        no_coverage_defaults: NoCoverageDefaults::ALL_DENY,
        autopilot_enabled: false,
        enduser_hitl_enabled: false,
        hitl_timeout_seconds: NoCoverageSettings::default().hitl_timeout_seconds,
    };
    unified(&BundleSource {
        agent_id,
        agent_mode: AgentMode::Enforce,
        mode_by_operation: &ModeByOperation::new(),
        attributes: &attributes,
        cognition_capture: false,
        rules: &[],
        no_coverage: &no_coverage,
    })
}

/// Builds the action bundle (`GET /allow/rules/bundle`).
pub fn action(
    rules: &[BundleRule],
    agent_mode: AgentMode,
    no_coverage: &NoCoverageSettings,
) -> ActionBundle {
    let mut rules: Vec<_> = rules
        .iter()
        .filter(|r| r.applies_to.contains(&Facet::Action))
        .cloned()
        .collect();
    sort_rules(&mut rules);
    let mut bundle = ActionBundle {
        version: String::new(),
        agent_mode,
        rules: rules
            .into_iter()
            .map(|r| ActionBundleRule {
                id: r.id,
                rule_code: r.rule_code,
                name: r.name,
                description: r.description,
                effect: r.effect,
                rego_source: r.rego_source,
                resource_type: "action".to_owned(),
                target_app: r.target_app,
                action_pattern: r.action_pattern,
                conditions: Vec::new(),
                priority: r.priority,
            })
            .collect(),
        no_coverage: no_coverage.clone(),
    };
    bundle.version = version_of(&bundle);
    bundle
}

/// Builds the retrieval bundle (`GET /recall/rules/bundle`): rules without
/// policy source are left out (spec 4.3).
pub fn retrieval(rules: &[BundleRule]) -> RetrievalBundle {
    let mut rules: Vec<_> = rules
        .iter()
        .filter(|r| r.applies_to.contains(&Facet::Retrieval) && !r.rego_source.trim().is_empty())
        .cloned()
        .collect();
    sort_rules(&mut rules);
    let mut bundle = RetrievalBundle {
        version: String::new(),
        rules: rules
            .into_iter()
            .map(|r| RetrievalBundleRule {
                id: r.id,
                name: r.name,
                rego_source: r.rego_source,
                trust_tier: r.trust_tier,
                surface: r.surface,
                principal_exclusions: r.principal_exclusions,
                priority: r.priority,
            })
            .collect(),
    };
    bundle.version = version_of(&bundle);
    bundle
}

fn sort_rules(rules: &mut [BundleRule]) {
    rules.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created_at.cmp(&b.created_at))
            .then(a.id.cmp(&b.id))
    });
}

/// The version of a bundle: SHA-256 of its canonical JSON without `version`.
pub fn version_of<T: Serialize>(bundle: &T) -> String {
    let mut value = serde_json::to_value(bundle).expect("bundles serialize");
    if let Value::Object(map) = &mut value {
        map.remove("version");
    }
    hex::encode(Sha256::digest(canonical_json(&value)))
}

/// The canonical encoding of a JSON value: keys sorted, no white space.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(k).expect("strings serialize"));
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).expect("scalars serialize")),
    }
}

/// Parses a unified bundle as a client receives it, checking that the content
/// hashes to the announced version. The hash is taken over the JSON as
/// received, so fields this engine does not know still count and are ignored.
pub fn parse(json: &[u8]) -> Result<UnifiedBundle, BundleError> {
    let raw: Value =
        serde_json::from_slice(json).map_err(|e| BundleError::NotUnderstood(e.to_string()))?;
    let announced = raw
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let min_dialect = raw.get("min_dialect").and_then(Value::as_u64).unwrap_or(0);
    if min_dialect > u64::from(DIALECT_VERSION) {
        return Err(BundleError::TooNew {
            min_dialect: u32::try_from(min_dialect).unwrap_or(u32::MAX),
        });
    }
    let actual = version_of(&raw);
    if actual != announced {
        return Err(BundleError::VersionMismatch { announced, actual });
    }
    serde_json::from_value(raw).map_err(|e| BundleError::NotUnderstood(e.to_string()))
}

/// Compiled rules kept across bundle refreshes, keyed by rule id and a hash of
/// the rule's content, so that an unchanged rule is compiled once.
#[derive(Debug, Default)]
pub struct RuleCache {
    compiled: Mutex<CacheMap>,
}

/// Compiled rules by rule id and content hash.
type CacheMap = HashMap<(Uuid, [u8; 32]), Arc<CompiledRule>>;

impl RuleCache {
    /// An empty cache.
    pub fn new() -> RuleCache {
        RuleCache::default()
    }

    /// The compiled form of `rule`, compiling it if its content is new.
    pub fn get_or_compile(&self, rule: &BundleRule) -> Result<Arc<CompiledRule>, CompileError> {
        let content = serde_json::to_value(rule).expect("rules serialize");
        let key = (rule.id, Sha256::digest(canonical_json(&content)).into());
        if let Some(c) = self.lock().get(&key) {
            return Ok(c.clone());
        }
        let compiled = Arc::new(CompiledRule::compile(rule)?);
        self.lock().insert(key, compiled.clone());
        Ok(compiled)
    }

    /// Drops every entry not used by `rules` (call after a successful load).
    pub fn retain(&self, rules: &[Arc<CompiledRule>]) {
        self.lock()
            .retain(|_, c| rules.iter().any(|r| Arc::ptr_eq(r, c)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheMap> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.compiled.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Checks the dialect of a unified bundle and compiles it into the policy set
/// it describes. (Content integrity is checked by [`parse`].)
pub fn load(bundle: &UnifiedBundle, cache: &RuleCache) -> Result<PolicySet, BundleError> {
    if bundle.min_dialect > DIALECT_VERSION {
        return Err(BundleError::TooNew {
            min_dialect: bundle.min_dialect,
        });
    }
    let rules = bundle
        .rules
        .iter()
        .map(|r| {
            cache.get_or_compile(r).map_err(|error| BundleError::Rule {
                rule_code: r.rule_code.clone(),
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    cache.retain(&rules);
    Ok(PolicySet::new(
        rules,
        AgentContext {
            agent_id: bundle.agent_id.clone(),
            mode: bundle.agent_mode,
            mode_by_operation: bundle.mode_by_operation.clone(),
            attributes: bundle.agent_attributes.clone(),
        },
        bundle.no_coverage.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_and_drops_space() {
        let v = json!({"b": [1, {"z": null, "a": "x"}], "a": true});
        assert_eq!(
            String::from_utf8(canonical_json(&v)).unwrap(),
            r#"{"a":true,"b":[1,{"a":"x","z":null}]}"#
        );
    }

    #[test]
    fn terminal_bundle_is_enforcing_and_empty() {
        let b = terminal("agent-1");
        assert_eq!(b.agent_mode, AgentMode::Enforce);
        assert!(b.rules.is_empty());
        assert_eq!(
            b.no_coverage.no_coverage_defaults,
            NoCoverageDefaults::ALL_DENY
        );
        assert_eq!(b.version, version_of(&b));
        assert_eq!(b.version.len(), 64);
    }
}
