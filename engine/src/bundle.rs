//! Bundles: building them with stable versions, loading them into policy sets.
