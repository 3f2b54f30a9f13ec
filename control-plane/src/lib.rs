//! Warden's control plane: the governance API server (axum) and the
//! operator's key-management CLI.
//!
//! # Layout
//! - [`config`]: raw configuration (file, environment, flags) and the
//!   validated [`config::Config`].
//! - [`app`]: shared state, the middleware stack and [`app::serve`].
//! - [`routes`]: the route table: every route, its handler and its access
//!   requirement in one place.
//! - [`auth`]: key material, permissions and scopes, authentication and the
//!   `authorize` middleware (401/403/429).
//! - [`api`]: handlers, one module per resource; [`keys`]: the key
//!   lifecycle they and the CLI share; [`rules`]: the rules collection.
//! - [`store`]: the storage interface and its SQLite and PostgreSQL
//!   backends (the only place that knows SQL).
//! - [`limit`]: the per-key sliding-window rate limiter (in-process or Redis);
//!   [`idempotency`]: `Idempotency-Key` on writes.
//! - [`error`]: [`error::ApiError`], the one error type, rendered as the
//!   spec's envelope; [`extract`]: extractors whose rejections are
//!   `ApiError`s; [`metrics`], [`openapi`].
//! - [`injector`]: the sidecar injector, a Kubernetes mutating admission
//!   webhook on its own TLS listener.
//!
//! # Not here
//! Decisions are made by `warden-engine`; this crate stores, serves and
//! authorizes. It never logs key material, request bodies or headers.

pub mod agents;
pub mod api;
pub mod app;
pub mod auth;
pub mod bundles;
pub mod config;
pub mod error;
pub mod evaluate;
pub mod extract;
pub mod idempotency;
pub mod injector;
pub mod keys;
pub mod limit;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod record;
pub mod routes;
pub mod rules;
pub mod sink;
pub mod store;
