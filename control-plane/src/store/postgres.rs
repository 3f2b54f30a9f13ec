//! The PostgreSQL backend: for several replicas sharing one database.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

/// A store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
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
        Ok(PostgresStore {
            pool,
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

super::sql::store_impl!(PostgresStore, sqlx::Postgres, {
    async fn insert_decisions(&self, batch: Arc<super::DecisionBatch>) -> StoreResult<()> {
        let actions: Vec<&ActionDecision> = batch.actions.iter().collect();
        let retrievals: Vec<&RetrievalDecision> = batch.retrievals.iter().collect();
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        insert_action_decisions_in(&mut tx, &actions, false).await?;
        // After the decisions: a gate refers to its decision.
        for gate in &batch.gates {
            insert_hitl_in(&mut *tx, gate).await?;
        }
        insert_retrieval_decisions_in(&mut tx, &retrievals).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(())
    }

    async fn announce_mode(&self, event: &super::ModeEvent) -> StoreResult<bool> {
        self.notify(MODE_CHANNEL, &event.payload()).await?;
        Ok(true)
    }

    /// Commits overlap on the server (its own group commit shares the
    /// flushes), so a batch need not wait for the previous one.
    fn concurrent_writers(&self) -> usize {
        4
    }

    fn hears_replicas(&self) -> bool {
        self.cache.is_live()
    }

    fn listen(&self, bus: tokio::sync::broadcast::Sender<super::ModeEvent>) {
        self.spawn_listener(bus)
    }
});
