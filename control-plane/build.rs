//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!`
//! embeds the files under `migrations/` at compile time, and without this an
//! incremental build that touches no Rust file would ship the old set.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
