//! The PostgreSQL backend: for several replicas sharing one database.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

/// A store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
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
        Ok(PostgresStore { pool })
    }
}

/// The `LISTEN/NOTIFY` channel mode changes travel on.
const MODE_CHANNEL: &str = "warden_mode";

impl PostgresStore {
    /// `NOTIFY`: every replica listening (this one included) relays it.
    pub(super) async fn notify_mode(&self, event: &super::ModeEvent) -> super::StoreResult<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(MODE_CHANNEL)
            .bind(event.payload())
            .execute(&self.pool)
            .await
            .map_err(super::statements::map_err)?;
        Ok(())
    }

    /// Relays notifications into `bus` until the process ends. The listener
    /// reconnects by itself after a connection loss.
    pub(super) fn spawn_relay(&self, bus: tokio::sync::broadcast::Sender<super::ModeEvent>) {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            loop {
                let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "mode relay: cannot connect; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(MODE_CHANNEL).await {
                    tracing::warn!(error = %e, "mode relay: LISTEN failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                loop {
                    match listener.recv().await {
                        Ok(n) => {
                            if let Some(ev) = super::ModeEvent::parse(n.payload()) {
                                // No subscriber is not an error.
                                let _ = bus.send(ev);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "mode relay: connection lost; reconnecting");
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
    async fn announce_mode(&self, event: &super::ModeEvent) -> StoreResult<bool> {
        self.notify_mode(event).await?;
        Ok(true)
    }

    fn relay_modes(&self, bus: tokio::sync::broadcast::Sender<super::ModeEvent>) {
        self.spawn_relay(bus)
    }
});
