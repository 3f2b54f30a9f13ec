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
            .map_err(super::sql::map_err)?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(PostgresStore { pool })
    }
}

super::sql::store_impl!(PostgresStore, sqlx::Postgres);
