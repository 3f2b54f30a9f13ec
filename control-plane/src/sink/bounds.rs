//! Bounds for the load test: what evaluation would cost if storing a
//! decision cost nothing, or only a raw append to a file and its
//! `fdatasync`. Compiled only with the cargo feature `bench-bounds`, which
//! no release build and no test enables: a binary built with it can be told
//! not to store decisions, which no governance server may do.
//!
//! `scripts/load-evaluate-bounds` builds such a binary and runs it next to
//! the normal one. The variant is chosen at start by `WARDEN_BENCH_BOUND`:
//! - unset: decisions are stored as always;
//! - `skip`: each decision is answered as soon as it is made, never stored
//!   or recorded. This bounds the request path alone.
//! - `log:PATH`: the decision sink writes each batch to the file at `PATH`
//!   (which must exist: the script fills it with zeros first, so that writes
//!   overwrite allocated blocks and no `fdatasync` has metadata to commit),
//!   one `write` and one `fdatasync` a batch, in place of the database.
//!   Each row is written as its strings and its JSON, with no framing: no
//!   database can store a decision for less. This bounds any durable store
//!   behind the same hand-off (queue, batch, answer). Approval gates are not
//!   written: the load test makes none.

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

use crate::store::DecisionBatch;

/// The environment variable that picks the variant.
const VARIABLE: &str = "WARDEN_BENCH_BOUND";

/// What the sink does with decisions in this process.
pub(super) enum Bound {
    /// Answers at once; stores nothing.
    Skip,
    /// Appends each batch to a file and flushes it; the database is unused.
    Log(Mutex<File>),
}

impl Bound {
    /// The variant `WARDEN_BENCH_BOUND` asks for, if any.
    ///
    /// # Panics
    /// On a value it does not know, or a log file it cannot open: a
    /// benchmark must never measure something else than it says.
    pub(super) fn from_env() -> Option<Bound> {
        let value = std::env::var(VARIABLE).ok()?;
        let bound = match value.split_once(':') {
            None if value == "skip" => Bound::Skip,
            Some(("log", path)) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .unwrap_or_else(|e| panic!("{VARIABLE}: cannot open {path}: {e}"));
                Bound::Log(Mutex::new(file))
            }
            _ => panic!("{VARIABLE}: expected skip or log:PATH, got {value:?}"),
        };
        tracing::warn!(
            bound = %value,
            "bench-bounds build: decisions are NOT stored in the database"
        );
        Some(bound)
    }

    /// Whether decisions skip the sink altogether.
    pub(super) fn skips(&self) -> bool {
        matches!(self, Bound::Skip)
    }

    /// Writes `batch` to the log file and flushes it; `None` when this
    /// variant has no log.
    pub(super) fn append(&self, batch: &DecisionBatch) -> Option<Result<(), String>> {
        let Bound::Log(file) = self else {
            return None;
        };
        let mut buf = Vec::with_capacity(512 * (batch.actions.len() + batch.retrievals.len()));
        for d in &batch.actions {
            for text in [
                d.agent_id.as_str(),
                &d.target_app,
                &d.action,
                d.decision.as_str(),
                &d.reason,
                d.rule_code.as_deref().unwrap_or(""),
                d.agent_mode.as_str(),
                &d.source,
            ] {
                buf.extend_from_slice(text.as_bytes());
            }
            buf.extend_from_slice(d.id.as_bytes());
            buf.extend_from_slice(d.org.0.as_bytes());
            let _ = serde_json::to_writer(&mut buf, &d.context);
            let _ = serde_json::to_writer(&mut buf, &d.floor_detectors);
            buf.extend_from_slice(&d.created_at.timestamp_micros().to_le_bytes());
        }
        for d in &batch.retrievals {
            for text in [
                d.agent_id.as_str(),
                &d.operation,
                &d.resource_type,
                d.decision.as_str(),
                &d.reason,
                d.reason_code.as_str(),
            ] {
                buf.extend_from_slice(text.as_bytes());
            }
            buf.extend_from_slice(d.id.as_bytes());
            let _ = serde_json::to_writer(&mut buf, &d.resource_metadata);
            buf.extend_from_slice(&d.created_at.timestamp_micros().to_le_bytes());
        }
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        let written = file.write_all(&buf).and_then(|()| file.sync_data());
        Some(written.map_err(|e| format!("bench log: {e}")))
    }
}
