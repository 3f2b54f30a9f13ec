//! The control plane's integration tests: the real server on 127.0.0.1:0,
//! driven over HTTP, against SQLite and against a real PostgreSQL.
//!
//! PostgreSQL comes from `WARDEN_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test gets its own
//! throw-away database. `scripts/test` starts PostgreSQL when it is not
//! running.

mod control_plane;
