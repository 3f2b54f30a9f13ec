//! Redaction (DESIGN §5): directives over JSON values, and the always-on floor.
//!
//! [`RedactionSet`] is a rule's directives compiled once. Applying it either
//! masks everything it should or fails with [`RedactionError`]: callers block
//! the call or exclude the document on failure, never pass it unmasked.
//! [`floor`] masks value shapes (emails, card numbers, keys, …) in every
//! persisted copy, whatever the rules say.

mod directive;
pub mod floor;

pub use directive::{DEFAULT_REPLACEMENT, RedactionSet};

/// The deepest JSON nesting redaction walks; deeper values fail closed.
pub const MAX_DEPTH: usize = 64;
/// The most directives one rule may carry.
pub const MAX_DIRECTIVES: usize = 64;

/// Why directives could not be compiled or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactionError {
    /// `redactions` was not an array of directive objects.
    #[error("redactions must be an array of directive objects: {0}")]
    Shape(String),
    /// A `pattern` or `keepPattern` did not compile within the limits.
    #[error("directive {index}: invalid {which}: {message}")]
    Pattern {
        /// Position of the directive.
        index: usize,
        /// `pattern` or `keepPattern`.
        which: &'static str,
        /// The compiler's message.
        message: String,
    },
    /// `maskChar` was not exactly one character.
    #[error("directive {0}: maskChar must be exactly one character")]
    MaskChar(usize),
    /// More directives than [`MAX_DIRECTIVES`].
    #[error("at most {MAX_DIRECTIVES} directives are allowed")]
    TooMany,
    /// The value nests deeper than [`MAX_DEPTH`].
    #[error("value nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
}
