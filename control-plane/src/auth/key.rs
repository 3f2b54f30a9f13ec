//! API key material (spec 2.1): generation, format checks, hashing, display.
//!
//! Only the SHA-256 of a key is ever stored; the plaintext exists in memory
//! between generation and the one response that returns it.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::permission::Environment;

/// How many characters of a key its display shows before the asterisks.
const DISPLAY_CHARS: usize = 16;

/// The prefix of agent keys minted by `POST /allow/agents`.
pub const AGENT_KEY_PREFIX: &str = "allow_";

/// A freshly generated key: the plaintext (shown once) and what is stored.
pub struct NewSecret {
    /// The key as the caller will present it.
    pub plaintext: String,
    /// SHA-256 of the plaintext, hex.
    pub hash: String,
    /// The first characters and asterisks.
    pub display: String,
}

impl std::fmt::Debug for NewSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSecret")
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

/// The prefix of a key of `environment`.
pub fn prefix(environment: Environment) -> &'static str {
    match environment {
        Environment::Production => "svc_prod_",
        Environment::Test => "svc_test_",
    }
}

/// Generates a key with `prefix` and 64 hexadecimal characters (32 random
/// bytes from the operating system's CSPRNG-seeded generator).
pub fn generate(prefix: &str) -> NewSecret {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let plaintext = format!("{prefix}{}", hex::encode(bytes));
    NewSecret {
        hash: hash(&plaintext),
        display: display(&plaintext),
        plaintext,
    }
}

/// SHA-256 of a presented key, hex.
pub fn hash(plaintext: &str) -> String {
    hex::encode(Sha256::digest(plaintext.as_bytes()))
}

/// Whether two stored hashes are equal, in time independent of where they differ.
pub fn hashes_match(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The display form: the first 16 characters followed by asterisks.
pub fn display(plaintext: &str) -> String {
    let head: String = plaintext.chars().take(DISPLAY_CHARS).collect();
    format!(
        "{head}{}",
        "*".repeat(plaintext.chars().count().saturating_sub(DISPLAY_CHARS))
    )
}

/// Whether `text` has the shape of a key this service issues: `svc_prod_` or
/// `svc_test_` (or the agent prefix) followed by 64 lowercase hex characters.
pub fn well_formed(text: &str) -> bool {
    let body = ["svc_prod_", "svc_test_", AGENT_KEY_PREFIX]
        .iter()
        .find_map(|p| text.strip_prefix(p));
    body.is_some_and(|b| b.len() == 64 && b.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

/// Whether `text` could be a key at all: 16-256 visible ASCII characters.
/// Issued keys are [`well_formed`]; agent keys may also be custom (spec 4.2,
/// at least 16 characters). Anything else is refused before any lookup.
pub fn presentable(text: &str) -> bool {
    (16..=256).contains(&text.len()) && text.bytes().all(|c| c.is_ascii_graphic())
}

/// A plaintext chosen by the caller (a custom agent key), with what is stored.
pub fn custom(plaintext: String) -> NewSecret {
    NewSecret {
        hash: hash(&plaintext),
        display: display(&plaintext),
        plaintext,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_spec_shape() {
        let k = generate(prefix(Environment::Production));
        assert!(k.plaintext.starts_with("svc_prod_"));
        assert_eq!(k.plaintext.len(), 9 + 64);
        assert!(well_formed(&k.plaintext));
        assert_eq!(k.hash, hash(&k.plaintext));
        assert_eq!(&k.display[..16], &k.plaintext[..16]);
        assert!(k.display[16..].chars().all(|c| c == '*'));
        assert_ne!(
            generate("svc_test_").plaintext,
            generate("svc_test_").plaintext
        );
    }

    #[test]
    fn malformed_keys_are_recognised() {
        assert!(!well_formed("svc_prod_abc"));
        assert!(!well_formed(&format!("svc_dev_{}", "a".repeat(64))));
        assert!(!well_formed(&format!("svc_prod_{}", "G".repeat(64))));
        assert!(well_formed(&format!("allow_{}", "0".repeat(64))));
        assert!(presentable("custom-agent-key-1"));
        assert!(!presentable("short"));
        assert!(!presentable("has a space in it ok"));
    }

    #[test]
    fn debug_never_shows_the_plaintext() {
        let k = generate("svc_test_");
        assert!(!format!("{k:?}").contains(&k.plaintext));
    }
}
