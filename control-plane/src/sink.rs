//! Where decisions go once made: stored durably, then recorded.
//!
//! Writes are group-committed: concurrent decisions queue for the writer,
//! which stores everything waiting (up to [`MAX_BATCH`]) in one
//! transaction, then answers each request. While the store's writers are
//! all busy (one for SQLite, which has one writer anyway; several for
//! PostgreSQL, whose commits overlap), the queue grows into the next batch. A decision's response is sent
//! only after its row is committed; batching only amortizes the commit.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::ApiError;
use crate::record::Recorder;
use crate::store::{ActionDecision, HitlItem, RetrievalDecision, Store, StoreError};

/// Most decisions one commit carries.
pub const MAX_BATCH: usize = 256;

/// One decision waiting to be stored.
enum Row {
    Action(Box<(ActionDecision, Option<HitlItem>)>),
    Retrieval(Box<RetrievalDecision>),
}

struct Job {
    row: Row,
    done: oneshot::Sender<Result<(), String>>,
}

/// The decision sink of a server.
pub struct DecisionSink {
    queue: mpsc::Sender<Job>,
    recorder: Arc<dyn Recorder>,
    notifier: crate::notify::Notifier,
}

impl std::fmt::Debug for DecisionSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionSink").finish_non_exhaustive()
    }
}

impl DecisionSink {
    /// Starts the writer task for `store`.
    pub fn start(store: Arc<dyn Store>, recorder: Arc<dyn Recorder>) -> DecisionSink {
        let (queue, rx) = mpsc::channel(MAX_BATCH * 16);
        let notifier = crate::notify::Notifier::new(store.clone());
        tokio::spawn(write_loop(store, rx));
        DecisionSink {
            queue,
            recorder,
            notifier,
        }
    }

    /// Stores an action decision (with its approval gate, if any) and
    /// records it.
    pub async fn action(
        &self,
        row: ActionDecision,
        gate: Option<HitlItem>,
    ) -> Result<(), ApiError> {
        self.store(Row::Action(Box::new((row.clone(), gate.clone()))))
            .await?;
        self.recorder.action(&row);
        if let Some(item) = gate {
            // Approvers hear of the gate once it is stored.
            self.notifier.announce(item);
        }
        Ok(())
    }

    /// Stores a retrieval decision and records it.
    pub async fn retrieval(&self, row: RetrievalDecision) -> Result<(), ApiError> {
        self.store(Row::Retrieval(Box::new(row.clone()))).await?;
        self.recorder.retrieval(&row);
        Ok(())
    }

    async fn store(&self, row: Row) -> Result<(), ApiError> {
        let (done, wait) = oneshot::channel();
        self.queue
            .send(Job { row, done })
            .await
            .map_err(|_| ApiError::Internal("the decision writer stopped".into()))?;
        wait.await
            .map_err(|_| ApiError::Internal("the decision writer stopped".into()))?
            .map_err(ApiError::Internal)
    }
}

async fn write_loop(store: Arc<dyn Store>, mut rx: mpsc::Receiver<Job>) {
    let writers = Arc::new(Semaphore::new(store.concurrent_writers().max(1)));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = writers.clone().acquire_owned().await else {
            return;
        };
        // Gather after a writer is free: what queued while every writer was
        // busy goes into this batch.
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let store = store.clone();
        tokio::spawn(async move {
            write_batch(store.as_ref(), jobs).await;
            drop(slot);
        });
    }
}

/// Commits `jobs` together and answers each.
async fn write_batch(store: &dyn Store, jobs: Vec<Job>) {
    let rows: Vec<&Row> = jobs.iter().map(|j| &j.row).collect();
    match write(store, &rows).await {
        Ok(()) => {
            for job in jobs {
                let _ = job.done.send(Ok(()));
            }
        }
        // One bad row must not fail its neighbours: write them one by one.
        Err(_) if jobs.len() > 1 => {
            for job in jobs {
                let result = write(store, &[&job.row]).await.map_err(|e| e.to_string());
                let _ = job.done.send(result);
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.done.send(Err(e.to_string()));
            }
        }
    }
}

async fn write(store: &dyn Store, rows: &[&Row]) -> Result<(), StoreError> {
    let (mut actions, mut gates, mut retrievals) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match row {
            Row::Action(pair) => {
                actions.push(&pair.0);
                gates.extend(pair.1.as_ref());
            }
            Row::Retrieval(d) => retrievals.push(d.as_ref()),
        }
    }
    store.insert_decisions(&actions, &gates, &retrievals).await
}
