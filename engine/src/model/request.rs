//! What the engine decides on: one governed event per facet (DESIGN §3 `input`).

use serde::{Deserialize, Serialize};

use super::vocab::RetrievalOperation;

/// An action (tool call, write) to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionInput {
    /// The acting agent.
    pub agent_id: String,
    /// The application or server the action targets.
    pub target_app: String,
    /// The action (tool) name.
    pub action: String,
    /// The action's arguments.
    #[serde(default = "empty_object")]
    pub context: serde_json::Value,
}

/// A retrieval (document, tool result, rendered prompt) to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalInput {
    /// The retrieving agent.
    pub agent_id: String,
    /// What kind of retrieval this is.
    #[serde(default)]
    pub operation: RetrievalOperation,
    /// The resource type, `document` by default.
    #[serde(default = "default_resource_type")]
    pub resource_type: String,
    /// Metadata of the retrieved resource.
    #[serde(default = "empty_object")]
    pub resource_metadata: serde_json::Value,
    /// The query that retrieved it.
    #[serde(default)]
    pub query: Option<String>,
    /// The delivery surface.
    #[serde(default)]
    pub surface: Option<String>,
    /// The tier the request claims; an assigned tier overrides it.
    #[serde(default)]
    pub trust_tier: Option<String>,
}

/// A delegation of authority from one agent to another (`orchestrate.delegate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegationInput {
    /// The delegating (parent) agent.
    pub agent_id: String,
    /// The application the delegation concerns.
    pub target_app: String,
    /// The grant being asked for.
    pub context: DelegationContext,
}

/// `input.context` of a delegation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelegationContext {
    /// The delegating agent.
    pub parent_agent_id: String,
    /// The receiving agent.
    pub child_agent_id: String,
    /// Tools the child may use; `None` inherits the parent's.
    #[serde(default)]
    pub tool_scope: Option<Vec<String>>,
    /// Resource types the child may reach; `None` inherits the parent's.
    #[serde(default)]
    pub context_scope: Option<Vec<String>>,
    /// Why.
    #[serde(default)]
    pub purpose: Option<String>,
}

/// The action name a delegation check runs under.
pub const DELEGATE_ACTION: &str = "orchestrate.delegate";

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn default_resource_type() -> String {
    "document".to_owned()
}
