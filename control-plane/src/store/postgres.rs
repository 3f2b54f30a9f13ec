//! The PostgreSQL backend: for several replicas sharing one database.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

/// A store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The decision sink's own connections, opened on first use: their
    /// sockets then belong to the sink thread's runtime, which waits for
    /// nothing else. On the server's runtime, busy workers poll for I/O
    /// only every few dozen tasks, and the answer to each commit waited
    /// there (measured: a 56-row commit took 2.2 ms, its WAL flush 0.4 ms).
    decisions: PgPool,
    cache: Arc<super::cache::ReadCache>,
}

impl PostgresStore {
    /// Connects to `url` and runs the migrations (under PostgreSQL's
    /// advisory lock, so replicas starting together migrate once).
    pub async fn open(url: &str) -> super::StoreResult<PostgresStore> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(super::statements::map_err)?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        let decisions = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with(pool.connect_options().as_ref().clone());
        Ok(PostgresStore {
            pool,
            decisions,
            // Idle until `listen` hears other replicas' writes.
            cache: Arc::new(super::cache::ReadCache::new(false)),
        })
    }
}

/// The `LISTEN/NOTIFY` channel mode changes travel on.
const MODE_CHANNEL: &str = "warden_mode";

/// The channel writes travel on: the payload is the organization whose
/// keys, agents, settings or rules changed.
const CHANGE_CHANNEL: &str = "warden_change";

impl PostgresStore {
    /// `NOTIFY`: every replica listening (this one included) relays it.
    async fn notify(&self, channel: &str, payload: &str) -> super::StoreResult<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(super::statements::map_err)?;
        Ok(())
    }

    /// Each decision commit reports its own failure (its flush is part of
    /// it), so there is no lasting state to report.
    fn decisions_health(&self) -> super::StoreResult<()> {
        Ok(())
    }

    /// After a write to `org`'s keys, agents, settings or rules commits:
    /// forget it here and tell the other replicas. If the notification
    /// fails, they see the change within the cache's `MAX_AGE`.
    async fn changed(&self, org: super::OrgId) {
        self.cache.forget(org);
        if let Err(e) = self.notify(CHANGE_CHANNEL, &org.0.to_string()).await {
            tracing::warn!(error = %e, "cannot announce a change to other replicas");
        }
    }

    /// Relays notifications until the process ends: mode changes into
    /// `bus`, writes into the read cache. The listener reconnects by itself
    /// after a connection loss; while it is down the cache is off, since
    /// other replicas' writes would go unheard.
    fn spawn_listener(&self, bus: tokio::sync::broadcast::Sender<super::ModeEvent>) {
        let (pool, cache) = (self.pool.clone(), self.cache.clone());
        tokio::spawn(async move {
            loop {
                cache.set_live(false);
                let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "replica listener: cannot connect; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen_all([MODE_CHANNEL, CHANGE_CHANNEL]).await {
                    tracing::warn!(error = %e, "replica listener: LISTEN failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                cache.set_live(true);
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) if n.channel() == CHANGE_CHANNEL => {
                            match uuid::Uuid::parse_str(n.payload()) {
                                Ok(org) => cache.forget(super::OrgId(org)),
                                // Not ours to parse: forget everything.
                                Err(_) => cache.flush(),
                            }
                        }
                        Ok(Some(n)) => {
                            if let Some(ev) = super::ModeEvent::parse(n.payload()) {
                                // No subscriber is not an error.
                                let _ = bus.send(ev);
                            }
                        }
                        // The connection dropped: notifications may have
                        // been missed, so nothing cached can be trusted.
                        Ok(None) => {
                            cache.set_live(false);
                            tracing::warn!("replica listener: connection lost; reconnecting");
                            break;
                        }
                        Err(e) => {
                            cache.set_live(false);
                            tracing::warn!(error = %e, "replica listener: connection lost; reconnecting");
                            break;
                        }
                    }
                }
            }
        });
    }
}

super::statements::statements!(sqlx::Postgres);

/// The decision sink's batch as one statement: each table's rows go in as
/// one array per column, expanded by `unnest`, and the three inserts are
/// data-modifying CTEs of the same statement. It commits by itself (one
/// statement is atomic), so a batch of any size is one round trip, where
/// `BEGIN`, one multi-row `INSERT` per chunk and `COMMIT` were several; and it
/// is one prepared statement whatever the batch's size.
///
/// The arrays are expanded in the select list (`SELECT unnest($1), …`),
/// where PostgreSQL steps them in lockstep as it inserts; `FROM UNNEST(…)`
/// first copies every row into a tuplestore. pgbench, prepared 20-row
/// batches, commits not flushed: 0.395–0.431 ms a batch against
/// 0.422–0.445 ms (three pairs), about 5%. Every array of a table has one
/// element per row, so no column is padded.
static INSERT_BATCH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    const ACTION_TYPES: &str = "uuid uuid text text text text text text text text uuid text bool text text text \
        text timestamptz text text timestamptz text timestamptz";
    const GATE_TYPES: &str = "uuid uuid uuid text text text text text text text text text text timestamptz \
        timestamptz text timestamptz";
    const RETRIEVAL_TYPES: &str = "uuid uuid text text text text text text text text text text text uuid bool \
        text text timestamptz";
    let mut n = 0;
    let mut unnest = |types: &str| {
        let columns: Vec<String> = types
            .split_whitespace()
            .map(|t| {
                n += 1;
                format!("unnest(${n}::{t}[])")
            })
            .collect();
        format!("SELECT {}", columns.join(", "))
    };
    let actions = unnest(ACTION_TYPES);
    let gates = unnest(GATE_TYPES);
    let retrievals = unnest(RETRIEVAL_TYPES);
    format!(
        "WITH a AS (INSERT INTO action_decisions ({ACTION_DECISION_COLUMNS}) {actions}), \
         g AS (INSERT INTO hitl_items ({HITL_COLUMNS}) {gates} ON CONFLICT DO NOTHING) \
         INSERT INTO retrieval_decisions ({RETRIEVAL_DECISION_COLUMNS}) {retrievals}"
    )
});

async fn insert_batch(pool: &PgPool, b: &super::DecisionBatch) -> StoreResult<()> {
    fn col<'a, T, U>(rows: &'a [T], f: impl Fn(&'a T) -> U) -> Vec<U> {
        rows.iter().map(f).collect()
    }
    let (a, g, r) = (&b.actions, &b.gates, &b.retrievals);
    sqlx::query(&INSERT_BATCH)
        .bind(col(a, |d| d.id))
        .bind(col(a, |d| d.org.0))
        .bind(col(a, |d| d.agent_id.as_str()))
        .bind(col(a, |d| d.target_app.as_str()))
        .bind(col(a, |d| d.action.as_str()))
        .bind(col(a, |d| json_text(&d.context)))
        .bind(col(a, |d| d.decision.as_str()))
        .bind(col(a, |d| d.would_decide.map(|w| w.as_str())))
        .bind(col(a, |d| d.reason.as_str()))
        .bind(col(a, |d| d.reason_code.map(|c| c.as_str())))
        .bind(col(a, |d| d.rule_id))
        .bind(col(a, |d| d.rule_code.as_deref()))
        .bind(col(a, |d| d.enforced))
        .bind(col(a, |d| d.agent_mode.as_str()))
        .bind(col(a, |d| json_text(&d.floor_detectors)))
        .bind(col(a, |d| d.source.as_str()))
        .bind(col(a, |d| d.hitl_result.as_deref()))
        .bind(col(a, |d| d.hitl_responded_at))
        .bind(col(a, |d| d.hitl_responded_by.as_deref()))
        .bind(col(a, |d| d.execution_result.as_deref()))
        .bind(col(a, |d| d.execution_completed_at))
        .bind(col(a, |d| d.execution_details.as_deref()))
        .bind(col(a, |d| d.created_at))
        .bind(col(g, |i| i.id))
        .bind(col(g, |i| i.org.0))
        .bind(col(g, |i| i.decision_id))
        .bind(col(g, |i| i.agent_id.as_str()))
        .bind(col(g, |i| i.target_app.as_str()))
        .bind(col(g, |i| i.action.as_str()))
        .bind(col(g, |i| json_text(&i.context)))
        .bind(col(g, |i| i.category.as_str()))
        .bind(col(g, |i| i.status.as_str()))
        .bind(col(g, |i| i.ai_recommended_rule.as_deref()))
        .bind(col(g, |i| json_text(&i.notified_via)))
        .bind(col(g, |i| i.resolution.as_deref()))
        .bind(col(g, |i| i.dedupe_key.as_deref()))
        .bind(col(g, |i| i.expires_at))
        .bind(col(g, |i| i.responded_at))
        .bind(col(g, |i| i.responded_by.as_deref()))
        .bind(col(g, |i| i.created_at))
        .bind(col(r, |d| d.id))
        .bind(col(r, |d| d.org.0))
        .bind(col(r, |d| d.agent_id.as_str()))
        .bind(col(r, |d| d.operation.as_str()))
        .bind(col(r, |d| d.resource_type.as_str()))
        .bind(col(r, |d| json_text(&d.resource_metadata)))
        .bind(col(r, |d| d.query.as_deref()))
        .bind(col(r, |d| d.surface.as_deref()))
        .bind(col(r, |d| d.trust_tier.as_deref()))
        .bind(col(r, |d| d.decision.as_str()))
        .bind(col(r, |d| d.would_decide.map(|w| w.as_str())))
        .bind(col(r, |d| d.reason.as_str()))
        .bind(col(r, |d| d.reason_code.as_str()))
        .bind(col(r, |d| d.rule_id))
        .bind(col(r, |d| d.enforced))
        .bind(col(r, |d| d.agent_mode.as_str()))
        .bind(col(r, |d| json_text(&d.floor_detectors)))
        .bind(col(r, |d| d.created_at))
        .execute(pool)
        .await
        .map_err(map_err)?;
    Ok(())
}

super::sql::store_impl!(PostgresStore, sqlx::Postgres, {
    /// The commit returns once its WAL is flushed (`synchronous_commit`
    /// stays on), so the batch is durable when it answers.
    async fn commit_decisions(
        &self,
        batch: Arc<super::DecisionBatch>,
    ) -> StoreResult<super::Flush> {
        insert_batch(&self.decisions, &batch).await?;
        Ok(super::Flush::done())
    }

    async fn announce_mode(&self, event: &super::ModeEvent) -> StoreResult<bool> {
        self.notify(MODE_CHANNEL, &event.payload()).await?;
        Ok(true)
    }

    fn hears_replicas(&self) -> bool {
        self.cache.is_live()
    }

    fn listen(&self, bus: tokio::sync::broadcast::Sender<super::ModeEvent>) {
        self.spawn_listener(bus)
    }
});
