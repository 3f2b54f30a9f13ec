//! Warden's sidecar (`warden-proxy`): runs beside one agent, intercepts its
//! tool calls, decides each one locally with the engine against a cached
//! rule bundle, forwards, masks or blocks inline, holds approvals, and
//! reports every decision to the control plane.
//!
//! Layout:
//! - [`config`]: the YAML file and environment, validated in two stages.
//! - [`route`]: HTTP method + path patterns mapped to action names.
//! - [`http`]: the HTTP route adapter and its phases (accept → classify →
//!   build input → decide → apply → filter response → report).
//! - [`governor`]: the engine's fail-closed client state, kept current by
//!   the bundle puller and the mode stream.
//! - [`control`]: the control-plane client.
//! - [`telemetry`]: the bounded, batched, never-blocking report queue.
//! - [`metrics`]: Prometheus metrics. [`server`]: `serve` and the admin
//!   listener.
//!
//! - [`mcp`]: the MCP adapter. [`forward`]: the forward proxy, with `CONNECT`
//!   interception for governed hosts ([`forward::ca`] mints the leaves).
//! - [`service`]: what adapters share (forwarding, approvals, reports).
//! - [`body`]: bounded reads and gzip/deflate decoding of bodies.

pub mod body;
pub mod config;
pub mod control;
pub mod forward;
pub mod governor;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod route;
pub mod server;
pub mod service;
mod sse;
pub mod telemetry;
