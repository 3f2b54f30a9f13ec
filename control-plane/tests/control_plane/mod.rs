mod auth;
mod cli;
mod envelope;
mod idempotency;
mod keys;
mod limits;
mod store;
mod support;
