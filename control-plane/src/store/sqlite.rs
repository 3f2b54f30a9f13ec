//! The SQLite backend: the embedded default. One file, WAL mode, no set-up.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    cache: Arc<super::cache::ReadCache>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite:PATH` or
    /// `sqlite://PATH`) and runs the migrations.
    pub async fn open(url: &str) -> super::StoreResult<SqliteStore> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(super::statements::map_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL with NORMAL is durable across application crashes and
            // consistent across power loss (the last commits may roll back).
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            // No memory map (SQLite's default). With one, transactions that
            // found the file grown unmapped and remapped it (munmap, TLB
            // shootdowns); without it, evaluate throughput under
            // `scripts/load-evaluate` rose 14%. The hot reads the map was for
            // are served by the read cache now.
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // A file in this process cannot drop a connection: the ping on
            // every checkout is a round trip to the connection's thread that
            // finds nothing (2.5% of the server's samples under load, though
            // throughput did not move beyond noise without it).
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(super::statements::map_err)?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        Ok(SqliteStore {
            pool,
            // Serves at once: this process sees its own writes, and another
            // process's (the `keys` CLI) within the cache's `MAX_AGE`.
            cache: Arc::new(super::cache::ReadCache::new(true)),
        })
    }

    /// After a write to `org`'s keys, agents, settings or rules commits.
    async fn changed(&self, org: super::OrgId) {
        self.cache.forget(org);
    }
}

super::statements::statements!(sqlx::Sqlite);

super::sql::store_impl!(SqliteStore, sqlx::Sqlite);
