//! The SQLite decision writer: one thread with its own connection that
//! commits the decision sink's batches, and one that makes them durable.
//!
//! Decisions are the one write on the request path, so they skip sqlx: its
//! SQLite driver runs each statement as a round trip to a connection thread
//! (`BEGIN`, the inserts, `COMMIT`: four or more per batch, each two thread
//! wake-ups), and copies every argument into an argument list first. Here a
//! batch is one hand-off to a thread that runs prepared statements straight
//! from the rows. Under `scripts/load-evaluate` this cut the server's
//! context switches per decision from 1.5 to 0.6 and raised evaluate
//! throughput by about a fifth (measured 2026-11-22; the README has the
//! current numbers).
//!
//! **Pipelined flush.** A decision is answered only once it is on stable
//! storage. With `synchronous=FULL` each commit would `fsync` the WAL while
//! holding the write lock, so commits and flushes alternate and the disk's
//! latency caps the rate of commits. Instead the writer commits with
//! `synchronous=NORMAL` (WAL frames written, not flushed) and hands each
//! committed batch to the flusher thread, which calls `fdatasync` on the WAL
//! file once for every batch committed before the call began, then releases
//! them ([`Flush`]). Meanwhile the writer is free to commit the next batch
//! (the decision sink gathers it once this one is released, which measured
//! better: see `sink::write_loop`). The guarantee is the one FULL gives (a released decision survives a power
//! loss: its frames are on disk, and recovery replays them), at the cost of
//! one flush per round instead of one per commit. Measured under
//! `scripts/load-evaluate` (32 connections): FULL 18.1–20.5k req/s, the
//! pipeline about 23k; the README has the current numbers.
//!
//! The writer also checkpoints the WAL into the database file, between two
//! commits, every [`CHECKPOINT_EVERY`] (see [`checkpoint`]). A checkpoint
//! flushes the WAL before it copies it and the database file after, so the
//! WAL is only ever restarted over frames that are already in the flushed
//! database file.
//!
//! Values are written exactly as sqlx writes them (ids as 16-byte blobs,
//! times as RFC 3339 text, JSON as text, booleans as 0/1), so the sqlx reads
//! and filters see no difference.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, OnceLock, mpsc};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::statements::{
    ACTION_DECISION_COLUMNS, HITL_COLUMNS, RETRIEVAL_DECISION_COLUMNS, json_text,
};
use super::{DecisionBatch, Flush, StoreError, StoreResult};

/// A batch and where its commit's outcome goes.
type Work = (Arc<DecisionBatch>, oneshot::Sender<StoreResult<Flush>>);

/// Where a committed batch hears that it is durable.
type Flushed = oneshot::Sender<StoreResult<()>>;

/// The handle of the writer thread; the thread ends when the last handle
/// is dropped, and the flusher after it.
#[derive(Debug, Clone)]
pub(super) struct DecisionWriter {
    queue: mpsc::Sender<Work>,
    /// Set once a flush failed: from then on no decision is durable.
    failed: Arc<OnceLock<String>>,
}

impl DecisionWriter {
    /// Opens a connection to the database file at `path` (already created
    /// and migrated) and starts the threads.
    pub(super) fn start(path: &Path) -> StoreResult<DecisionWriter> {
        let conn = open(path).map_err(map_err)?;
        // SQLite names the WAL after the database file.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let (queue, work) = mpsc::channel();
        let (flush, flushes) = mpsc::channel();
        let spawn_err = |e| StoreError::Writer(format!("cannot start the decision writer: {e}"));
        std::thread::Builder::new()
            .name("sqlite-decisions".into())
            .spawn(move || run(conn, work, flush))
            .map_err(spawn_err)?;
        let failed = Arc::new(OnceLock::new());
        let flusher = failed.clone();
        std::thread::Builder::new()
            .name("sqlite-flush".into())
            .spawn(move || flush_loop(&wal, flushes, &flusher))
            .map_err(spawn_err)?;
        Ok(DecisionWriter { queue, failed })
    }

    /// `Err` once a flush of the WAL failed (readiness reports it).
    pub(super) fn health(&self) -> StoreResult<()> {
        match self.failed.get() {
            None => Ok(()),
            Some(e) => Err(StoreError::Writer(format!(
                "the SQLite WAL could not be flushed ({e}); decisions are refused until restart"
            ))),
        }
    }

    /// Commits `batch` in one transaction; the batch is durable once the
    /// returned flush resolves.
    pub(super) async fn write(&self, batch: Arc<DecisionBatch>) -> StoreResult<Flush> {
        let stopped = || StoreError::Writer("the decision writer stopped".into());
        let (done, outcome) = oneshot::channel();
        self.queue.send((batch, done)).map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

/// The connection settings of the sqlx pool that matter to a writer: WAL
/// (already the file's journal mode, which persists), foreign keys, and the
/// same wait for the write lock; but `NORMAL` sync, since the flusher
/// thread makes the commits durable.
fn open(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

fn run(mut conn: Connection, work: mpsc::Receiver<Work>, flush: mpsc::Sender<Flushed>) {
    let mut checkpointed = Instant::now();
    // Whether frames were committed since the last checkpoint.
    let mut behind = false;
    loop {
        let (batch, done) = match work.recv_timeout(CHECKPOINT_EVERY) {
            Ok(work) => work,
            // Idle: copy what is left into the database file.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if behind {
                    checkpoint(&conn);
                    (behind, checkpointed) = (false, Instant::now());
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // A panic fails this batch (its transaction rolls back as it
        // unwinds), not the thread: later batches must still be stored.
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            insert(&mut conn, &batch).map_err(map_err)
        }));
        let outcome = attempt.unwrap_or_else(|_| {
            Err(StoreError::Writer(
                "the decision writer panicked on this batch".into(),
            ))
        });
        // The sink takes the rows back once the batch is answered.
        drop(batch);
        let outcome = outcome.and_then(|()| {
            // Committed: the next flush to begin covers it.
            let (flushed, durable) = oneshot::channel();
            flush
                .send(flushed)
                .map_err(|_| StoreError::Writer("the log flusher stopped".into()))?;
            Ok(Flush::pending(durable))
        });
        let _ = done.send(outcome);
        behind = true;
        if checkpointed.elapsed() >= CHECKPOINT_EVERY {
            checkpoint(&conn);
            (behind, checkpointed) = (false, Instant::now());
        }
    }
}

/// How often the writer copies the WAL into the database file while it
/// commits, and how long it waits, idle, before copying the rest.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Copies the WAL's committed frames into the database file, between two
/// commits of the writer. No connection checkpoints by itself
/// (`wal_autocheckpoint=0`): an automatic checkpoint runs inside the commit
/// that crosses the threshold, and every decision waiting for that commit
/// waits for the checkpoint's two `fsync`s. Here the batch is answered
/// first. Because no decision commits while it runs, the checkpoint catches
/// up with the end of the WAL, and the next commit starts the WAL over from
/// its beginning: the file stays the size of a quarter second of writes.
/// (A checkpointer on a thread of its own, as before, never caught up with a
/// writer that commits without pause, and under load the WAL grew by about
/// 50 MB a second, without end.)
fn checkpoint(conn: &Connection) {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    if let Err(e) = done {
        tracing::warn!(error = %e, "SQLite checkpoint failed; retrying");
    }
}

/// Flushes the WAL for the committed batches, until the writer ends. Each
/// round takes every batch committed so far, so one `fdatasync` releases all
/// the batches committed while the previous one ran. The WAL is opened on
/// the first round (the writer's first commit made sure it exists).
///
/// A failed flush is final, as in PostgreSQL: after an `fsync` error Linux
/// may have dropped the dirty pages and cleared the error, so a retry that
/// succeeds proves nothing. From then on every batch fails (the requests get
/// 500, never a claim that the decision is stored) and readiness reports the
/// store down, until a restart recovers from the WAL.
fn flush_loop(wal: &Path, flushes: mpsc::Receiver<Flushed>, failed: &OnceLock<String>) {
    let mut file: Option<File> = None;
    while let Ok(first) = flushes.recv() {
        let waiting: Vec<Flushed> = std::iter::once(first).chain(flushes.try_iter()).collect();
        if failed.get().is_none()
            && let Err(e) = sync(&mut file, wal)
        {
            tracing::error!(
                error = %e,
                wal = %wal.display(),
                "cannot flush the SQLite WAL; decisions are refused until restart"
            );
            let _ = failed.set(e.to_string());
        }
        for flushed in waiting {
            let _ = flushed.send(match failed.get() {
                None => Ok(()),
                Some(e) => Err(StoreError::Writer(format!("cannot flush the WAL: {e}"))),
            });
        }
    }
}

/// `fdatasync` on the WAL file: Linux flushes a file's written data through
/// any descriptor of it, so SQLite's own writes are covered. The descriptor
/// is kept while the path still names the same file: SQLite deletes the WAL
/// only when the last connection closes (never while the writer's is open),
/// but a flush of a file that is no longer the WAL would be silently wrong,
/// so each round checks.
fn sync(file: &mut Option<File>, wal: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let current = std::fs::metadata(wal)?;
    let open = match file.take() {
        Some(f)
            if f.metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == (current.dev(), current.ino())) =>
        {
            f
        }
        _ => File::open(wal)?,
    };
    open.sync_data()?;
    *file = Some(open);
    Ok(())
}

/// `INSERT INTO {table} ({columns}) VALUES (?, …)`, with `tail` after it.
fn insert_sql(table: &str, columns: &str, tail: &str) -> String {
    let marks = vec!["?"; columns.split(',').count()].join(", ");
    format!("INSERT INTO {table} ({columns}) VALUES ({marks}){tail}")
}

static INSERT_ACTION: LazyLock<String> =
    LazyLock::new(|| insert_sql("action_decisions", ACTION_DECISION_COLUMNS, ""));
static INSERT_GATE: LazyLock<String> =
    LazyLock::new(|| insert_sql("hitl_items", HITL_COLUMNS, " ON CONFLICT DO NOTHING"));
static INSERT_RETRIEVAL: LazyLock<String> =
    LazyLock::new(|| insert_sql("retrieval_decisions", RETRIEVAL_DECISION_COLUMNS, ""));

/// A time as sqlx's SQLite driver encodes it.
fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, false)
}

fn insert(conn: &mut Connection, batch: &DecisionBatch) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !batch.actions.is_empty() {
        let mut st = tx.prepare_cached(&INSERT_ACTION)?;
        for d in &batch.actions {
            st.execute(params![
                d.id.as_bytes().as_slice(),
                d.org.0.as_bytes().as_slice(),
                d.agent_id,
                d.target_app,
                d.action,
                json_text(&d.context),
                d.decision.as_str(),
                d.would_decide.map(|w| w.as_str()),
                d.reason,
                d.reason_code.map(|c| c.as_str()),
                d.rule_id.as_ref().map(|id| id.as_bytes().as_slice()),
                d.rule_code,
                d.enforced,
                d.agent_mode.as_str(),
                json_text(&d.floor_detectors),
                d.source,
                d.hitl_result,
                d.hitl_responded_at.map(time),
                d.hitl_responded_by,
                d.execution_result,
                d.execution_completed_at.map(time),
                d.execution_details,
                time(d.created_at),
            ])?;
        }
    }
    // After the decisions: a gate refers to its decision.
    if !batch.gates.is_empty() {
        let mut st = tx.prepare_cached(&INSERT_GATE)?;
        for i in &batch.gates {
            st.execute(params![
                i.id.as_bytes().as_slice(),
                i.org.0.as_bytes().as_slice(),
                i.decision_id.as_ref().map(|id| id.as_bytes().as_slice()),
                i.agent_id,
                i.target_app,
                i.action,
                json_text(&i.context),
                i.category,
                i.status,
                i.ai_recommended_rule,
                json_text(&i.notified_via),
                i.resolution,
                i.dedupe_key,
                i.expires_at.map(time),
                i.responded_at.map(time),
                i.responded_by,
                time(i.created_at),
            ])?;
        }
    }
    if !batch.retrievals.is_empty() {
        let mut st = tx.prepare_cached(&INSERT_RETRIEVAL)?;
        for d in &batch.retrievals {
            st.execute(params![
                d.id.as_bytes().as_slice(),
                d.org.0.as_bytes().as_slice(),
                d.agent_id,
                d.operation,
                d.resource_type,
                json_text(&d.resource_metadata),
                d.query,
                d.surface,
                d.trust_tier,
                d.decision.as_str(),
                d.would_decide.map(|w| w.as_str()),
                d.reason,
                d.reason_code.as_str(),
                d.rule_id.as_ref().map(|id| id.as_bytes().as_slice()),
                d.enforced,
                d.agent_mode.as_str(),
                json_text(&d.floor_detectors),
                time(d.created_at),
            ])?;
        }
    }
    tx.commit()
}

/// A duplicate id is a conflict, as with sqlx; anything else is a database
/// error.
fn map_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::ConstraintViolation)
            if matches!(
                e.sqlite_error().map(|f| f.extended_code),
                Some(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
                    | Some(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
            ) =>
        {
            StoreError::Conflict(e.to_string())
        }
        _ => StoreError::Writer(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One flush round: a batch's flush request, and its outcome.
    /// A flusher thread for a WAL path in a fresh directory (the file is
    /// not created): the path, the flush queue, the failure flag, and the
    /// thread, which ends once the queue is dropped.
    struct Flusher {
        dir: PathBuf,
        wal: PathBuf,
        queue: mpsc::Sender<Flushed>,
        failed: Arc<OnceLock<String>>,
        thread: std::thread::JoinHandle<()>,
    }

    impl Flusher {
        fn start() -> Flusher {
            let dir = std::env::temp_dir().join(format!("warden-flush-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            let wal = dir.join("w.db-wal");
            let failed = Arc::new(OnceLock::new());
            let (queue, flushes) = mpsc::channel();
            let (path, flag) = (wal.clone(), failed.clone());
            let thread = std::thread::spawn(move || flush_loop(&path, flushes, &flag));
            Flusher {
                dir,
                wal,
                queue,
                failed,
                thread,
            }
        }

        /// One flush round: a batch's flush request, and its outcome.
        fn round(&self) -> StoreResult<()> {
            let (flushed, outcome) = oneshot::channel();
            self.queue.send(flushed).unwrap();
            outcome.blocking_recv().unwrap()
        }

        fn stop(self) {
            drop(self.queue);
            self.thread.join().unwrap();
            std::fs::remove_dir_all(&self.dir).unwrap();
        }
    }

    // Guards the sticky failure: after a failed flush, a later flush that
    // would succeed must not release decisions (an `fsync` error may have
    // cost the dirty pages, and a retry proves nothing).
    #[test]
    fn a_failed_flush_fails_every_later_batch() {
        let flusher = Flusher::start();
        // No file to flush: the round fails.
        assert!(flusher.round().is_err());
        assert!(flusher.failed.get().is_some());
        // The file exists now, but the failure stands.
        std::fs::write(&flusher.wal, b"frames").unwrap();
        let later = flusher.round().unwrap_err().to_string();
        assert!(later.contains("cannot flush the WAL"), "{later}");
        flusher.stop();
    }

    #[test]
    fn a_flush_of_the_wal_releases_its_batches() {
        let flusher = Flusher::start();
        std::fs::write(&flusher.wal, b"frames").unwrap();
        flusher.round().unwrap();
        flusher.round().unwrap();
        assert!(flusher.failed.get().is_none());
        flusher.stop();
    }

    #[test]
    fn insert_statements_have_a_mark_per_column() {
        for (sql, columns) in [
            (&*INSERT_ACTION, ACTION_DECISION_COLUMNS),
            (&*INSERT_GATE, HITL_COLUMNS),
            (&*INSERT_RETRIEVAL, RETRIEVAL_DECISION_COLUMNS),
        ] {
            assert_eq!(sql.matches('?').count(), columns.split(',').count());
        }
    }

    #[test]
    fn times_are_written_as_sqlx_writes_them() {
        let t = DateTime::parse_from_rfc3339("2026-11-22T10:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(time(t), "2026-11-22T10:00:00.123456+00:00");
    }
}
