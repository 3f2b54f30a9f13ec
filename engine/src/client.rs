//! The client fail-closed state machine (spec §9).
