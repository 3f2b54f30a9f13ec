mod auth;
mod cli;
mod envelope;
mod keys;
mod limits;
mod store;
mod support;
