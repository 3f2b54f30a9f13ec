//! Where decisions go once made: stored durably, then recorded.
//!
//! Writes are group-committed: concurrent decisions queue for the writer,
//! which commits everything waiting (up to [`MAX_BATCH`]) in one
//! transaction; once the commit is durable (its [`Flush`] resolved), each
//! stored decision is recorded and each request answered. While the store
//! commits and flushes, the queue grows into the next batch. A decision's
//! response is sent only after its row is on stable storage; batching only
//! amortizes the commit and the flush. The rows move from the request into
//! the batch and are never copied; once stored and recorded, they go back to
//! the requests' tasks, to be freed on the server's workers.
//!
//! One commit at a time on both backends: SQLite has one writer anyway, and
//! on PostgreSQL, where each batch is one statement, overlapping commits
//! measured slower (smaller batches, more commits, more of the database's
//! CPU on the same cores). On SQLite, where a commit returns before its
//! flush, the next batch is gathered once this one is released (see
//! [`write_loop`]).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::record::Recorder;
use crate::store::{ActionDecision, DecisionBatch, Flush, HitlItem, RetrievalDecision, Store};

#[cfg(feature = "bench-bounds")]
mod bounds;

/// Most decisions one commit carries.
pub const MAX_BATCH: usize = 256;

/// One decision waiting to be stored.
enum Row {
    Action(Box<(ActionDecision, Option<HitlItem>)>),
    Retrieval(Box<RetrievalDecision>),
}

struct Job {
    row: Row,
    done: Done,
}

/// What the writer needs: where rows go, and who hears of them once stored.
struct Writer {
    store: Arc<dyn Store>,
    recorder: Arc<dyn Recorder>,
    notifier: Notifier,
    metrics: Arc<Metrics>,
    #[cfg(feature = "bench-bounds")]
    bound: Option<Arc<bounds::Bound>>,
}

/// The decision sink of a server.
pub struct DecisionSink {
    queue: mpsc::Sender<Job>,
    #[cfg(feature = "bench-bounds")]
    bound: Option<Arc<bounds::Bound>>,
}

impl std::fmt::Debug for DecisionSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionSink").finish_non_exhaustive()
    }
}

impl DecisionSink {
    /// Starts the writer for `store`, on a thread of its own (see
    /// [`write_loop`]). Called on the server's runtime: approval
    /// notifications are delivered there.
    ///
    /// # Panics
    /// Outside a tokio runtime, or if the thread cannot start.
    pub fn start(
        store: Arc<dyn Store>,
        recorder: Arc<dyn Recorder>,
        metrics: Arc<Metrics>,
    ) -> DecisionSink {
        let (queue, rx) = mpsc::channel(MAX_BATCH * 16);
        let notifier = Notifier::new(store.clone());
        #[cfg(feature = "bench-bounds")]
        let bound = bounds::Bound::from_env().map(Arc::new);
        let writer = Writer {
            store,
            recorder,
            notifier,
            metrics,
            #[cfg(feature = "bench-bounds")]
            bound: bound.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the decision sink's runtime starts");
        std::thread::Builder::new()
            .name("decision-sink".into())
            .spawn(move || runtime.block_on(write_loop(writer, rx)))
            .expect("the decision sink's thread starts");
        DecisionSink {
            queue,
            #[cfg(feature = "bench-bounds")]
            bound,
        }
    }

    /// Stores an action decision (with its approval gate, if any) and
    /// records it.
    pub async fn action(
        &self,
        row: ActionDecision,
        gate: Option<HitlItem>,
    ) -> Result<(), ApiError> {
        self.store(Row::Action(Box::new((row, gate)))).await
    }

    /// Stores a retrieval decision and records it.
    pub async fn retrieval(&self, row: RetrievalDecision) -> Result<(), ApiError> {
        self.store(Row::Retrieval(Box::new(row))).await
    }

    async fn store(&self, row: Row) -> Result<(), ApiError> {
        #[cfg(feature = "bench-bounds")]
        if self.bound.as_ref().is_some_and(|b| b.skips()) {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        self.queue
            .send(Job { row, done })
            .await
            .map_err(|_| ApiError::Internal("the decision writer stopped".into()))?;
        wait.await
            .map_err(|_| ApiError::Internal("the decision writer stopped".into()))?
            // The stored row (if any) is dropped here, on this worker.
            .map(drop)
            .map_err(ApiError::Internal)
    }
}

/// Gathers decisions into batches and commits them, one at a time, until
/// the sink is dropped; then waits until every committed batch is answered.
///
/// It runs on a thread of its own (a single-threaded runtime, with the
/// answer loop): on the server's runtime, the writer's turn came after every
/// request task queued on its worker, and under load that wait, not the
/// disk, set the pace of commits.
///
/// On SQLite a commit returns before its flush (see [`Flush`]): the next
/// batch is gathered only once the last one is released (flushed and
/// answered), so each commit takes everything that queued during one flush,
/// and a request waits for about one and a half flushes. Measured under
/// `scripts/load-evaluate` (SQLite, 32 connections, same session): 22.8k
/// req/s, 11.8 rows a commit, 49 µs of CPU per request, against 19.4k, 6.8
/// rows and 60 µs when batch k+1 committed while batch k's flush ran (the
/// flusher never idled, but each request waited for about two and a half
/// flushes, and the commits were smaller). A commit that is durable when it
/// returns (PostgreSQL) does not wait for its answers.
async fn write_loop(writer: Writer, mut rx: mpsc::Receiver<Job>) {
    let writer = Arc::new(writer);
    let (committed, flushes) = mpsc::channel(FLUSHES_QUEUED);
    // How many commits with a pending flush were sent, and released.
    let (released, mut answered) = tokio::sync::watch::channel(0u64);
    let answers = tokio::spawn(answer_loop(writer.clone(), flushes, released));
    let mut sent = 0u64;
    while let Some(first) = rx.recv().await {
        // The answer loop only stops after this loop.
        let _ = answered.wait_for(|n| *n >= sent).await;
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        writer.metrics.batch(jobs.len());
        // A panic fails this batch's requests (their answers are dropped),
        // never the writer: later decisions must still be stored.
        let batch = std::panic::AssertUnwindSafe(writer.commit_batch(jobs));
        match futures_util::FutureExt::catch_unwind(batch).await {
            Ok(tried) => {
                for c in tried {
                    if c.awaits_flush() {
                        sent += 1;
                    }
                    // The answer loop ends only after this loop.
                    let _ = committed.send(c).await;
                }
            }
            Err(_) => {
                tracing::error!("the decision writer panicked on a batch; its requests failed")
            }
        }
    }
    drop(committed);
    let _ = answers.await;
}

/// Committed batches queued for the answer loop (the one-by-one fallback
/// queues several at once).
const FLUSHES_QUEUED: usize = 4;

/// Answers committed batches in commit order, each once its flush resolved:
/// records its decisions, then tells its requests.
async fn answer_loop(
    writer: Arc<Writer>,
    mut flushes: mpsc::Receiver<Committed>,
    released: tokio::sync::watch::Sender<u64>,
) {
    while let Some(committed) = flushes.recv().await {
        let pending = committed.awaits_flush();
        let Committed {
            batch,
            flush,
            waiting,
        } = committed;
        let waited = std::time::Instant::now();
        let outcome = match flush {
            Ok(flush) => flush.wait().await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if pending {
            writer.metrics.flush(waited.elapsed());
        }
        let mut rows = None;
        if outcome.is_ok() {
            let record = std::panic::AssertUnwindSafe(|| writer.stored(batch));
            match std::panic::catch_unwind(record) {
                Ok(back) => rows = Some(back),
                Err(_) => tracing::error!("recording a stored batch panicked"),
            }
        }
        // Each request takes a row back to free on its own worker (see
        // `Leftover`); which request frees which row does not matter.
        let mut rows = rows.into_iter().flatten();
        for done in waiting {
            let _ = done.send(outcome.clone().map(|()| rows.next()));
        }
        if pending {
            released.send_modify(|n| *n += 1);
        }
    }
}

type Done = oneshot::Sender<Result<Option<Leftover>, String>>;

/// A stored row on its way back to a request's task, only to be dropped
/// there, on a worker of the server's runtime, where rows are built. On the
/// sink's thread every free of a row is a cross-thread free in mimalloc
/// (handed to the allocating thread to collect); on a worker it is a local
/// free whenever that worker built the row (often, not always: tokio's work
/// stealing moves tasks between workers). Measured under the load of
/// `scripts/load-evaluate` (SQLite, 128 connections, ten interleaved A/B
/// pairs): the sink's CPU per decision fell in all ten (1.88 → 1.58 µs on
/// average), the server's total by a median of 1.3 µs, within this VM's
/// noise.
#[expect(dead_code, reason = "the rows are carried only to be dropped")]
enum Leftover {
    Action(ActionDecision),
    Retrieval(RetrievalDecision),
}

/// A batch whose commit was tried: its requests are answered once the
/// commit is durable (or at once, with the commit's error).
struct Committed {
    batch: DecisionBatch,
    flush: Result<Flush, String>,
    waiting: Vec<Done>,
}

impl Committed {
    /// Committed, but not durable until its flush resolves (SQLite): the
    /// next batch is gathered only once it is released.
    fn awaits_flush(&self) -> bool {
        self.flush.as_ref().is_ok_and(|f| !f.is_done())
    }
}

/// Where a job's row sits in its batch: an action (with or without a gate)
/// or a retrieval, in job order within each list.
#[derive(Clone, Copy)]
enum Slot {
    Action { gated: bool },
    Retrieval,
}

impl Writer {
    /// Commits `jobs` together; if that fails and there are several, one by
    /// one, so that one bad row does not fail its neighbours.
    async fn commit_batch(&self, jobs: Vec<Job>) -> Vec<Committed> {
        let mut batch = DecisionBatch::default();
        let mut slots = Vec::with_capacity(jobs.len());
        let mut waiting = Vec::with_capacity(jobs.len());
        for Job { row, done } in jobs {
            let slot = match row {
                Row::Action(pair) => {
                    let (action, gate) = *pair;
                    batch.actions.push(action);
                    let gated = gate.is_some();
                    batch.gates.extend(gate);
                    Slot::Action { gated }
                }
                Row::Retrieval(d) => {
                    batch.retrievals.push(*d);
                    Slot::Retrieval
                }
            };
            slots.push(slot);
            waiting.push(done);
        }
        let (batch, flush) = self.commit(batch).await;
        if flush.is_err() && waiting.len() > 1 {
            return self.commit_one_by_one(batch, slots, waiting).await;
        }
        vec![Committed {
            batch,
            flush,
            waiting,
        }]
    }

    async fn commit_one_by_one(
        &self,
        batch: DecisionBatch,
        slots: Vec<Slot>,
        waiting: Vec<Done>,
    ) -> Vec<Committed> {
        let DecisionBatch {
            actions,
            gates,
            retrievals,
        } = batch;
        let (mut actions, mut gates, mut retrievals) = (
            actions.into_iter(),
            gates.into_iter(),
            retrievals.into_iter(),
        );
        let mut tried = Vec::with_capacity(waiting.len());
        for (slot, done) in slots.into_iter().zip(waiting) {
            let mut one = DecisionBatch::default();
            match slot {
                Slot::Action { gated } => {
                    one.actions.extend(actions.next());
                    if gated {
                        one.gates.extend(gates.next());
                    }
                }
                Slot::Retrieval => one.retrievals.extend(retrievals.next()),
            }
            let (batch, flush) = self.commit(one).await;
            tried.push(Committed {
                batch,
                flush,
                waiting: vec![done],
            });
        }
        tried
    }

    /// Commits `batch`, and gives it back for recording.
    async fn commit(&self, batch: DecisionBatch) -> (DecisionBatch, Result<Flush, String>) {
        #[cfg(feature = "bench-bounds")]
        if let Some(appended) = self.bound.as_ref().and_then(|b| b.append(&batch)) {
            return (batch, appended.map(|()| Flush::done()));
        }
        let batch = Arc::new(batch);
        let started = std::time::Instant::now();
        let flush = self.store.commit_decisions(batch.clone()).await;
        self.metrics.commit(started.elapsed());
        // The store holds no copy once it answered; the clone is a fallback
        // for a backend that kept one.
        let batch = Arc::try_unwrap(batch).unwrap_or_else(|shared| (*shared).clone());
        (batch, flush.map_err(|e| e.to_string()))
    }

    /// Records the decisions of a durable batch; approvers hear of each
    /// gate once it is stored. Gives the rows back, to be freed elsewhere.
    fn stored(&self, batch: DecisionBatch) -> impl Iterator<Item = Leftover> + use<> {
        for d in &batch.actions {
            self.recorder.action(d);
        }
        for d in &batch.retrievals {
            self.recorder.retrieval(d);
        }
        for gate in batch.gates {
            self.notifier.announce(gate);
        }
        let actions = batch.actions.into_iter().map(Leftover::Action);
        actions.chain(batch.retrievals.into_iter().map(Leftover::Retrieval))
    }
}
