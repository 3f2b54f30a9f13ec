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
    decisions: super::sqlite_writer::DecisionWriter,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite:PATH` or
    /// `sqlite://PATH`) and runs the migrations.
    pub async fn open(url: &str) -> super::StoreResult<SqliteStore> {
        // The decision writer is a second connection to the same file; an
        // in-memory database would be a different one for it.
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Err(super::StoreError::Writer(
                "an in-memory SQLite database is not supported: give a file path".into(),
            ));
        }
        let options = SqliteConnectOptions::from_str(url)
            .map_err(super::statements::map_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL with FULL: each commit of this pool (rules, keys, agents,
            // settings, telemetry, approvals) is flushed to the disk before
            // it returns, so whatever the API answered as stored survives a
            // power loss. Decisions take the writer's pipelined flush
            // instead (see `sqlite_writer`).
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // No memory map (SQLite's default). With one, transactions that
            // found the file grown unmapped and remapped it (munmap, TLB
            // shootdowns); without it, evaluate throughput under
            // `scripts/load-evaluate` rose 14%. The hot reads the map was for
            // are served by the read cache now.
            .busy_timeout(Duration::from_secs(5))
            // The decision writer's checkpointer copies the WAL into the
            // file, off every commit path (see `sqlite_writer`).
            .pragma("wal_autocheckpoint", "0");
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // A file in this process cannot drop a connection: the ping on
            // every checkout is a round trip to the connection's thread that
            // finds nothing (2.5% of the server's samples under load, though
            // throughput did not move beyond noise without it).
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(super::statements::map_err)?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        let decisions = super::sqlite_writer::DecisionWriter::start(options.get_filename())?;
        Ok(SqliteStore {
            pool,
            decisions,
            // Serves at once: this process sees its own writes, and another
            // process's (the `keys` CLI) within the cache's `MAX_AGE`.
            cache: Arc::new(super::cache::ReadCache::new(true)),
        })
    }

    /// After a write to `org`'s keys, agents, settings or rules commits.
    async fn changed(&self, org: super::OrgId) {
        self.cache.forget(org);
    }

    /// Whether decisions can still be made durable (see `sqlite_writer`).
    fn decisions_health(&self) -> super::StoreResult<()> {
        self.decisions.health()
    }
}

super::statements::statements!(sqlx::Sqlite);

super::sql::store_impl!(SqliteStore, sqlx::Sqlite, {
    async fn commit_decisions(
        &self,
        batch: Arc<super::DecisionBatch>,
    ) -> StoreResult<super::Flush> {
        self.decisions.write(batch).await
    }
});
