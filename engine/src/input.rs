//! The `input` document a rule sees (DESIGN §3), as a view over the request.
//!
//! The native path reads fields in place through [`InputDoc::root`]; only the
//! regorus fallback asks for the whole document as JSON ([`InputDoc::to_json`]).
//! Both must describe the same document: a field that is `None` is absent
//! (undefined) in both.

use std::cell::OnceCell;

use serde_json::{Map, Value, json};

use crate::dialect::native::{PathKey, Seg};
use crate::dialect::value::Val;
use crate::model::{
    ActionInput, AgentAttributes, AgentMode, DELEGATE_ACTION, DelegationInput, Facet,
    RetrievalInput,
};

/// The top-level fields of `input`, resolved once at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Root {
    Facet,
    AgentId,
    TargetApp,
    Action,
    Context,
    Operation,
    ResourceType,
    ResourceMetadata,
    Query,
    Surface,
    TrustTier,
    Agent,
    /// A name no facet defines: always undefined.
    Other,
}

impl Root {
    pub(crate) fn parse(name: &str) -> Root {
        match name {
            "facet" => Root::Facet,
            "agent_id" => Root::AgentId,
            "target_app" => Root::TargetApp,
            "action" => Root::Action,
            "context" => Root::Context,
            "operation" => Root::Operation,
            "resource_type" => Root::ResourceType,
            "resource_metadata" => Root::ResourceMetadata,
            "query" => Root::Query,
            "surface" => Root::Surface,
            "trust_tier" => Root::TrustTier,
            "agent" => Root::Agent,
            _ => Root::Other,
        }
    }
}

/// The agent as rules see it (`input.agent`), rendered once per policy set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentDoc(Value);

impl AgentDoc {
    pub(crate) fn new(agent_id: &str, mode: AgentMode, attrs: &AgentAttributes) -> AgentDoc {
        let mut m = Map::new();
        m.insert("agent_id".into(), json!(agent_id));
        m.insert("mode".into(), json!(mode));
        if let Some(t) = &attrs.trust_tier {
            m.insert("trust_tier".into(), json!(t));
        }
        m.insert("categories".into(), json!(attrs.categories));
        if let Some(bf) = attrs.business_function {
            m.insert("business_function".into(), json!(bf));
        }
        m.insert("business_functions".into(), json!(attrs.business_functions));
        if let Some(b) = &attrs.blast_radius_tier {
            m.insert("blast_radius_tier".into(), json!(b));
        }
        AgentDoc(Value::Object(m))
    }
}

thread_local! {
    static REGORUS_INPUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many request inputs this thread has converted into regorus values:
/// the fixed cost of a rule outside the native subset. Decisions by native
/// rules convert none (a test holds the engine to that).
pub fn regorus_inputs_on_this_thread() -> u64 {
    REGORUS_INPUTS.with(std::cell::Cell::get)
}

/// One governed event as the `input` document. Each path the policy set reads
/// is resolved at most once per decision, however many rules read it (the
/// set numbers its distinct paths; see `PolicySet`), and the regorus form is
/// made at most once (only if a fallback rule asks for it).
pub(crate) struct InputDoc<'a> {
    view: View<'a>,
    paths: Box<[OnceCell<Option<Val<'a>>>]>,
    regorus: OnceCell<regorus::Value>,
}

/// The request an `input` document describes.
#[derive(Clone, Copy)]
pub(crate) enum View<'a> {
    Action {
        input: &'a ActionInput,
        agent: &'a AgentDoc,
    },
    Retrieval {
        input: &'a RetrievalInput,
        agent: &'a AgentDoc,
        /// The assigned tier if the agent has one, else the request's.
        trust_tier: Option<&'a str>,
    },
    Delegation {
        input: &'a DelegationInput,
        context: &'a Value,
        agent: &'a AgentDoc,
    },
}

impl<'a> InputDoc<'a> {
    /// A document for `view` with room to cache `paths` distinct paths.
    pub(crate) fn new(view: View<'a>, paths: usize) -> InputDoc<'a> {
        InputDoc {
            view,
            paths: (0..paths).map(|_| OnceCell::new()).collect(),
            regorus: OnceCell::new(),
        }
    }

    /// The value at `path`, which the policy set numbered `slot`: resolved on
    /// first use, then read from the cache.
    pub(crate) fn path(&self, slot: u32, path: &PathKey) -> Option<Val<'a>> {
        match self.paths.get(slot as usize) {
            Some(cell) => cell.get_or_init(|| self.resolve(path)).clone(),
            None => self.resolve(path),
        }
    }

    /// Caches `value` as the value of slot `slot` (found by walking its
    /// parent; see `decide::prefetch`). A slot already resolved is kept.
    pub(crate) fn fill(&self, slot: u32, value: Val<'a>) {
        if let Some(cell) = self.paths.get(slot as usize) {
            let _already_resolved = cell.set(Some(value));
        }
    }

    /// As [`InputDoc::path`], borrowing the cached value.
    pub(crate) fn path_ref(&self, slot: u32, path: &PathKey) -> Option<&Val<'a>> {
        self.paths
            .get(slot as usize)?
            .get_or_init(|| self.resolve(path))
            .as_ref()
    }

    /// The value of `input.<root>.<segs…>`, or `None` when undefined.
    pub(crate) fn resolve(&self, (root, segs): &PathKey) -> Option<Val<'a>> {
        let mut v = self.root(*root)?;
        for seg in segs {
            v = match (v, seg) {
                (Val::Object(o), Seg::Key(k)) => Val::of(o.get(k.as_ref())?),
                (Val::Array(a), Seg::Index(i)) => Val::of(a.get(*i)?),
                _ => return None,
            };
        }
        Some(v)
    }

    /// The document as a regorus value, converted on first use.
    pub(crate) fn regorus_value(&self) -> &regorus::Value {
        self.regorus.get_or_init(|| {
            REGORUS_INPUTS.with(|n| n.set(n.get() + 1));
            regorus::Value::from(self.to_json())
        })
    }

    pub(crate) fn facet(&self) -> Facet {
        match self.view {
            View::Action { .. } => Facet::Action,
            View::Retrieval { .. } => Facet::Retrieval,
            View::Delegation { .. } => Facet::Delegation,
        }
    }

    /// The value of `input.<root>`, or `None` when undefined.
    pub(crate) fn root(&self, root: Root) -> Option<Val<'a>> {
        if root == Root::Facet {
            return Some(Val::str(self.facet().as_str()));
        }
        match self.view {
            View::Action { input, agent } => match root {
                Root::AgentId => Some(Val::str(&input.agent_id)),
                Root::TargetApp => Some(Val::str(&input.target_app)),
                Root::Action => Some(Val::str(&input.action)),
                Root::Context => Some(Val::of(&input.context)),
                Root::Agent => Some(Val::of(&agent.0)),
                _ => None,
            },
            View::Retrieval {
                input,
                agent,
                trust_tier,
            } => match root {
                Root::AgentId => Some(Val::str(&input.agent_id)),
                Root::Operation => Some(Val::str(input.operation.as_str())),
                Root::ResourceType => Some(Val::str(&input.resource_type)),
                Root::ResourceMetadata => Some(Val::of(&input.resource_metadata)),
                Root::Query => input.query.as_deref().map(Val::str),
                Root::Surface => input.surface.as_deref().map(Val::str),
                Root::TrustTier => trust_tier.map(Val::str),
                Root::Agent => Some(Val::of(&agent.0)),
                _ => None,
            },
            View::Delegation {
                input,
                context,
                agent,
            } => match root {
                Root::AgentId => Some(Val::str(&input.agent_id)),
                Root::TargetApp => Some(Val::str(&input.target_app)),
                Root::Action => Some(Val::str(DELEGATE_ACTION)),
                Root::Context => Some(Val::of(context)),
                Root::Agent => Some(Val::of(&agent.0)),
                _ => None,
            },
        }
    }

    /// The whole document as JSON, for the regorus fallback.
    pub(crate) fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("facet".into(), json!(self.facet()));
        match &self.view {
            View::Action { input, agent } => {
                m.insert("agent_id".into(), json!(input.agent_id));
                m.insert("target_app".into(), json!(input.target_app));
                m.insert("action".into(), json!(input.action));
                m.insert("context".into(), input.context.clone());
                m.insert("agent".into(), agent.0.clone());
            }
            View::Retrieval {
                input,
                agent,
                trust_tier,
            } => {
                m.insert("agent_id".into(), json!(input.agent_id));
                m.insert("operation".into(), json!(input.operation));
                m.insert("resource_type".into(), json!(input.resource_type));
                m.insert("resource_metadata".into(), input.resource_metadata.clone());
                if let Some(q) = &input.query {
                    m.insert("query".into(), json!(q));
                }
                if let Some(s) = &input.surface {
                    m.insert("surface".into(), json!(s));
                }
                if let Some(t) = trust_tier {
                    m.insert("trust_tier".into(), json!(t));
                }
                m.insert("agent".into(), agent.0.clone());
            }
            View::Delegation {
                input,
                context,
                agent,
            } => {
                m.insert("agent_id".into(), json!(input.agent_id));
                m.insert("target_app".into(), json!(input.target_app));
                m.insert("action".into(), json!(DELEGATE_ACTION));
                m.insert("context".into(), (*context).clone());
                m.insert("agent".into(), agent.0.clone());
            }
        }
        Value::Object(m)
    }
}
