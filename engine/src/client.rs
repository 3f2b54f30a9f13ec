//! The client fail-closed state machine (spec §9, DESIGN §4).
//!
//! A sidecar holds one [`ClientState`]. It knows two things: whether the
//! backend has confirmed the agent's mode (by a bundle or a mode event), and
//! whether a runnable bundle is loaded. Without a bundle:
//!
//! | mode known       | action       | retrieval   |
//! |------------------|--------------|-------------|
//! | never confirmed  | runs as monitor: permit, not enforced | allow, not enforced |
//! | enforce          | deny         | deny (document suppressed) |
//! | monitor / off    | permit       | allow       |
//!
//! A bundle that is refused (too new a dialect, a construct this engine does
//! not understand, a rule that does not compile) is not run, and the state
//! falls back to the table above. A fetch that merely fails keeps the last
//! good bundle: that is the caller's choice, by not calling [`ClientState::refuse`].

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::bundle::{self, BundleError, RuleCache};
use crate::decide::{PolicySet, Verdict};
use crate::model::{
    ActionInput, AgentMode, Decision, DelegationInput, Facet, ReasonCode, RetrievalInput,
};

/// What the sidecar knows about its agent's governance.
#[derive(Debug, Default)]
pub struct ClientState {
    confirmed: Option<AgentMode>,
    policy: Option<Arc<PolicySet>>,
    version: Option<String>,
    refused: Option<BundleError>,
    cache: RuleCache,
}

impl ClientState {
    /// A client that has heard nothing from the backend yet.
    pub fn new() -> ClientState {
        ClientState::default()
    }

    /// The mode the backend confirmed, if any.
    pub fn confirmed_mode(&self) -> Option<AgentMode> {
        self.confirmed
    }

    /// The version of the loaded bundle.
    pub fn bundle_version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Why the last bundle was refused, while no bundle is loaded since.
    pub fn refusal(&self) -> Option<&BundleError> {
        self.refused.as_ref()
    }

    /// The loaded policy set, if a bundle is loaded.
    pub fn policy(&self) -> Option<&Arc<PolicySet>> {
        self.policy.as_ref()
    }

    /// Installs a bundle as received from `GET /rules/bundle`. On success the
    /// bundle's mode counts as confirmed. On failure the bundle is refused
    /// (see [`ClientState::refuse`]) and the error returned.
    pub fn install(&mut self, json: &[u8]) -> Result<(), BundleError> {
        let prepared = self.prepare(json);
        self.apply(prepared)
    }

    /// The slow half of [`ClientState::install`]: parses and compiles a
    /// bundle under a shared borrow, so that a sidecar keeps deciding with
    /// the current bundle meanwhile. [`ClientState::apply`] then swaps it in.
    pub fn prepare(&self, json: &[u8]) -> PreparedBundle {
        let result = bundle::parse(json)
            .and_then(|b| bundle::load(&b, &self.cache).map(|set| (b.version, b.agent_mode, set)))
            .map_err(|e| {
                // A refused bundle still tells the mode, when it can be read:
                // a confirmed-enforcing agent must fail closed.
                let mode = serde_json::from_slice::<Value>(json)
                    .ok()
                    .and_then(|v| v.get("agent_mode").cloned())
                    .and_then(|m| serde_json::from_value(m).ok());
                (e, mode)
            });
        PreparedBundle { result }
    }

    /// Installs a prepared bundle, or refuses it.
    pub fn apply(&mut self, prepared: PreparedBundle) -> Result<(), BundleError> {
        match prepared.result {
            Ok((version, mode, set)) => {
                self.confirmed = Some(mode);
                self.policy = Some(Arc::new(set));
                self.version = Some(version);
                self.refused = None;
                Ok(())
            }
            Err((e, mode)) => {
                self.refuse(e.clone(), mode);
                Err(e)
            }
        }
    }

    /// Drops the loaded bundle because it must not run; `mode` is the mode it
    /// announced, if readable.
    pub fn refuse(&mut self, why: BundleError, mode: Option<AgentMode>) {
        if mode.is_some() {
            self.confirmed = mode;
        }
        self.policy = None;
        self.version = None;
        self.refused = Some(why);
    }

    /// The bundle is gone (evicted, expired): decide by the confirmed mode.
    pub fn lose_bundle(&mut self) {
        self.policy = None;
        self.version = None;
    }

    /// A `mode_snapshot` or `mode_changed` event: applies at once.
    pub fn set_mode(&mut self, mode: AgentMode) {
        self.confirmed = Some(mode);
        if let Some(p) = &self.policy
            && p.agent().mode != mode
        {
            let mut agent = p.agent().clone();
            agent.mode = mode;
            self.policy = Some(Arc::new(PolicySet::new(
                p.rules().to_vec(),
                agent,
                p.no_coverage().clone(),
            )));
        }
    }

    /// Decides an action.
    pub fn decide_action(&self, input: &ActionInput) -> Verdict {
        match &self.policy {
            Some(p) => p.decide_action(input),
            None => self.without_bundle(Facet::Action),
        }
    }

    /// Decides a retrieval.
    pub fn decide_retrieval(&self, input: &RetrievalInput, now: DateTime<Utc>) -> Verdict {
        match &self.policy {
            Some(p) => p.decide_retrieval(input, now),
            None => self.without_bundle(Facet::Retrieval),
        }
    }

    /// Decides a delegation.
    pub fn decide_delegation(&self, input: &DelegationInput) -> Verdict {
        match &self.policy {
            Some(p) => p.decide_delegation(input),
            None => self.without_bundle(Facet::Delegation),
        }
    }

    /// Decides a call whose payload could not be read (unparseable, over the
    /// size limit): no rule can judge what it cannot see, so the call is
    /// denied when the facet enforces (fail closed) and observed otherwise.
    pub fn decide_unjudgeable(&self, facet: Facet, why: &str) -> Verdict {
        let mode = match &self.policy {
            Some(p) => p.mode(facet),
            None => self.confirmed.unwrap_or(AgentMode::Monitor),
        };
        let mut v = Verdict::new(
            facet,
            Decision::Deny,
            format!("{why}: the call cannot be judged; failing closed"),
        );
        if facet == Facet::Retrieval {
            v.reason_code = Some(ReasonCode::DefaultDeny);
        }
        v.in_mode(mode)
    }

    fn without_bundle(&self, facet: Facet) -> Verdict {
        let why = match &self.refused {
            Some(e) => format!("no runnable policy bundle ({e})"),
            None => "no policy bundle loaded".to_owned(),
        };
        let mode = self.confirmed.unwrap_or(AgentMode::Monitor);
        let mut v = Verdict::new(facet, Decision::Deny, format!("{why}; failing closed"));
        if facet == Facet::Retrieval {
            v.reason_code = Some(ReasonCode::DefaultDeny);
        }
        match self.confirmed {
            None => {
                // Never confirmed: run as monitor, but there is no real outcome
                // to report, so nothing is claimed in `would_decide`.
                let mut v = v.in_mode(AgentMode::Monitor);
                v.would_decide = None;
                v.reason = format!("{why}; mode not yet confirmed, running as monitor");
                v
            }
            Some(_) => v.in_mode(mode),
        }
    }
}

/// A bundle parsed and compiled by [`ClientState::prepare`], not yet
/// installed.
#[derive(Debug)]
pub struct PreparedBundle {
    result: Result<(String, AgentMode, PolicySet), (BundleError, Option<AgentMode>)>,
}

/// What became of a call whose verdict asks for masking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskOutcome {
    /// The value was masked; this many values were rewritten.
    Masked(usize),
    /// Masking failed: the call must be blocked or the document excluded.
    Blocked(String),
}

/// Applies a verdict's directives to `value`, failing closed: if the verdict
/// carries no directives or they cannot be applied, the caller must block.
pub fn mask_or_block(verdict: &Verdict, value: &mut Value) -> MaskOutcome {
    let Some(set) = &verdict.redactions else {
        return MaskOutcome::Blocked("no redaction directives to apply".to_owned());
    };
    let mut copy = value.clone();
    match set.apply(&mut copy) {
        Ok(n) => {
            *value = copy;
            MaskOutcome::Masked(n)
        }
        Err(e) => MaskOutcome::Blocked(e.to_string()),
    }
}
