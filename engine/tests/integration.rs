//! Engine integration tests.
