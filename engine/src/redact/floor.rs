//! The always-on value-shape floor (DESIGN §5).
//!
//! Whatever the rules say, every persisted copy of request data passes through
//! [`apply`]: values shaped like emails, payment cards (Luhn-valid), US social
//! security numbers, phone numbers, IBANs (mod-97 valid), JWTs, common secret
//! keys and private-key blocks are replaced by `[REDACTED:<detector>]`, and the
//! detectors that fired are reported. A `RegexSet` screens each string first, so
//! clean strings cost one pass.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{MAX_DEPTH, RedactionError};

/// A value shape the floor recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    /// `-----BEGIN … PRIVATE KEY-----` blocks.
    PrivateKey,
    /// JSON Web Tokens.
    Jwt,
    /// API keys: `sk-…`, `AKIA…`, `ghp_…`, `github_pat_…`, `xox?-…`, `sk_live_…`.
    SecretKey,
    /// Email addresses.
    Email,
    /// International bank account numbers passing the mod-97 check.
    Iban,
    /// Payment card numbers passing the Luhn check.
    CardNumber,
    /// US social security numbers.
    UsSsn,
    /// Phone numbers.
    Phone,
}

impl Detector {
    /// Detectors in the order they are applied: longer, more specific shapes first.
    pub const ALL: [Detector; 8] = [
        Detector::PrivateKey,
        Detector::Jwt,
        Detector::SecretKey,
        Detector::Email,
        Detector::Iban,
        Detector::CardNumber,
        Detector::UsSsn,
        Detector::Phone,
    ];

    /// The detector's name, as reported in `floor_detectors`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Detector::PrivateKey => "private_key",
            Detector::Jwt => "jwt",
            Detector::SecretKey => "secret_key",
            Detector::Email => "email",
            Detector::Iban => "iban",
            Detector::CardNumber => "card_number",
            Detector::UsSsn => "us_ssn",
            Detector::Phone => "phone",
        }
    }

    const fn pattern(self) -> &'static str {
        match self {
            Detector::PrivateKey => {
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            }
            Detector::Jwt => r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
            Detector::SecretKey => {
                r"\b(?:sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|xox[abprs]-[A-Za-z0-9-]{10,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,})"
            }
            Detector::Email => r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
            Detector::Iban => r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
            Detector::CardNumber => r"\b[0-9](?:[ -]?[0-9]){12,18}\b",
            Detector::UsSsn => r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
            Detector::Phone => {
                r"\+[0-9]{1,3}[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,4})(?:[ .-]?[0-9]{2,4}){2,4}\b|(?:\(\b[0-9]{3}\)|\b[0-9]{3})[ .-]?[0-9]{3}[ .-][0-9]{4}\b"
            }
        }
    }

    /// A check beyond the shape, where the shape alone over-matches.
    fn confirms(self, text: &str) -> bool {
        match self {
            Detector::CardNumber => luhn_valid(text),
            Detector::Iban => iban_valid(text),
            Detector::UsSsn => ssn_plausible(text),
            _ => true,
        }
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

struct Floor {
    screen: RegexSet,
    each: Vec<(Detector, Regex)>,
}

static FLOOR: LazyLock<Floor> = LazyLock::new(|| {
    let patterns = Detector::ALL.map(Detector::pattern);
    Floor {
        screen: RegexSet::new(patterns).expect("floor patterns are valid"),
        each: Detector::ALL
            .iter()
            .map(|d| (*d, Regex::new(d.pattern()).expect("floor pattern is valid")))
            .collect(),
    }
});

/// Which detectors fired while masking.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloorReport {
    /// Fired detectors, in a stable order.
    pub detectors: BTreeSet<Detector>,
}

impl FloorReport {
    /// The names for `floor_detectors`.
    pub fn names(&self) -> Vec<&'static str> {
        self.detectors.iter().map(|d| d.as_str()).collect()
    }
}

/// Masks every floor shape in the strings under `value`.
pub fn apply(value: &mut Value, report: &mut FloorReport) -> Result<(), RedactionError> {
    walk(value, 0, report)
}

/// Masks every floor shape in one string; `None` when nothing matched.
pub fn apply_str(text: &str, report: &mut FloorReport) -> Option<String> {
    let floor = &*FLOOR;
    let hits = floor.screen.matches(text);
    if !hits.matched_any() {
        return None;
    }
    let mut out = text.to_owned();
    let mut changed = false;
    for (i, (detector, re)) in floor.each.iter().enumerate() {
        if !hits.matched(i) {
            continue;
        }
        let mut fired = false;
        let replaced = re.replace_all(&out, |caps: &regex::Captures<'_>| {
            if detector.confirms(&caps[0]) {
                fired = true;
                format!("[REDACTED:{detector}]")
            } else {
                caps[0].to_owned()
            }
        });
        if fired {
            out = replaced.into_owned();
            report.detectors.insert(*detector);
            changed = true;
        }
    }
    changed.then_some(out)
}

fn walk(value: &mut Value, depth: usize, report: &mut FloorReport) -> Result<(), RedactionError> {
    if depth > MAX_DEPTH {
        return Err(RedactionError::TooDeep);
    }
    match value {
        Value::String(s) => {
            if let Some(masked) = apply_str(s, report) {
                *s = masked;
            }
        }
        Value::Array(items) => {
            for v in items {
                walk(v, depth + 1, report)?;
            }
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                walk(v, depth + 1, report)?;
            }
        }
        // A bare JSON number can hold a card number too.
        Value::Number(n) => {
            let text = n.to_string();
            if let Some(masked) = apply_str(&text, report) {
                *value = Value::String(masked);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
    Ok(())
}

fn luhn_valid(text: &str) -> bool {
    let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

fn iban_valid(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut rem: u32 = 0;
    for c in tail.chars().chain(head.chars()) {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

fn ssn_plausible(text: &str) -> bool {
    let area = &text[0..3];
    let group = &text[4..6];
    let serial = &text[7..11];
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn masked(text: &str) -> (String, Vec<&'static str>) {
        let mut r = FloorReport::default();
        let out = apply_str(text, &mut r).unwrap_or_else(|| text.to_owned());
        (out, r.names())
    }

    #[test]
    fn each_detector_fires_on_its_shape() {
        let cases = [
            ("mail jane@example.com now", "email"),
            ("card 4111 1111 1111 1111", "card_number"),
            ("ssn 123-45-6789", "us_ssn"),
            ("call +1 415-555-0142", "phone"),
            ("call (415) 555-0142", "phone"),
            ("call 415.555.0142", "phone"),
            ("iban GB82 WEST 1234 5698 7654 32", "iban"),
            (
                "tok eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghij",
                "jwt",
            ),
            ("key sk-proj-abcdefghijklmnopqrstuvwx", "secret_key"),
            ("aws AKIAIOSFODNN7EXAMPLE", "secret_key"),
            ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789", "secret_key"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
                "private_key",
            ),
        ];
        for (text, detector) in cases {
            let (out, names) = masked(text);
            assert_eq!(names, vec![detector], "{text} -> {out}");
            assert!(out.contains(&format!("[REDACTED:{detector}]")), "{out}");
        }
    }

    #[test]
    fn lookalikes_that_fail_their_checks_are_kept() {
        for text in [
            "order 4111 1111 1111 1112",
            "id 000-12-3456",
            "GB00 WEST 1234 5698 7654 32",
            "plain words",
        ] {
            let (out, names) = masked(text);
            assert!(names.is_empty(), "{text} -> {out} {names:?}");
            assert_eq!(out, text);
        }
    }

    #[test]
    fn floor_walks_json_and_is_idempotent() {
        let mut v =
            json!({"a": ["x jane@example.com"], "n": 4111111111111111_u64, "b": {"k": "ok"}});
        let mut r = FloorReport::default();
        apply(&mut v, &mut r).unwrap();
        let once = v.clone();
        apply(&mut v, &mut FloorReport::default()).unwrap();
        assert_eq!(v, once);
        assert_eq!(r.names(), vec!["email", "card_number"]);
        assert_eq!(v["n"], json!("[REDACTED:card_number]"));
    }
}
