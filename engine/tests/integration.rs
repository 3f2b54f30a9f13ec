//! The engine's integration tests: one binary, one module per concern.

mod engine;
