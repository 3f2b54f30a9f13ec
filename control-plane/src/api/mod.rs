//! HTTP handlers, one module per resource. Handlers stay short: extract,
//! call a service function, map to the response.

pub mod agents;
pub mod audit;
pub mod bundles;
pub mod evaluate;
pub mod hitl;
pub mod keys;
pub mod ops;
pub mod rules;
pub mod settings;
pub mod stream;
pub mod telemetry;
