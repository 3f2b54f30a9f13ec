//! End-to-end tests over the real binaries: the control plane on SQLite, the
//! sidecar in front of real upstreams, driven by real clients on 127.0.0.1.

mod approval;
mod chart;
mod durability;
mod examples;
mod forward;
mod http_route;
mod injector;
mod mcp;
mod outage;
mod quickstart;
mod reporting;
