//! Compiled redaction directives (spec 2.4) and how each mode masks.

use regex::Regex;
use serde_json::Value;

use super::{MAX_DEPTH, MAX_DIRECTIVES, RedactionError};
use crate::dialect::compile_pattern;
use crate::model::{MaskMode, RedactionDirective};

/// What `full` mode writes when a directive names no replacement or mask character.
pub const DEFAULT_REPLACEMENT: &str = "[REDACTED]";
const DEFAULT_MASK_CHAR: char = '*';

/// A rule's directives, compiled once and applied to many values.
#[derive(Debug, Clone)]
pub struct RedactionSet {
    wire: Vec<RedactionDirective>,
    compiled: Vec<Compiled>,
}

#[derive(Debug, Clone)]
struct Compiled {
    field: Option<String>,
    pattern: Option<Regex>,
    masker: Masker,
}

#[derive(Debug, Clone)]
struct Masker {
    mode: MaskMode,
    replacement: Option<String>,
    mask_char: Option<char>,
    keep_first: usize,
    keep_last: usize,
    keep_pattern: Option<Regex>,
}

impl RedactionSet {
    /// Compiles directives; an invalid pattern or mask character is an error.
    pub fn compile(directives: Vec<RedactionDirective>) -> Result<RedactionSet, RedactionError> {
        if directives.len() > MAX_DIRECTIVES {
            return Err(RedactionError::TooMany);
        }
        let pattern = |index, which, p: &Option<String>| {
            p.as_deref()
                .map(compile_pattern)
                .transpose()
                .map_err(|message| RedactionError::Pattern {
                    index,
                    which,
                    message,
                })
        };
        let mut compiled = Vec::with_capacity(directives.len());
        for (i, d) in directives.iter().enumerate() {
            let mask_char = match d.mask_char.as_deref() {
                None => None,
                Some(s) => {
                    let mut chars = s.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) => Some(c),
                        _ => return Err(RedactionError::MaskChar(i)),
                    }
                }
            };
            compiled.push(Compiled {
                field: d.field.clone(),
                pattern: pattern(i, "pattern", &d.pattern)?,
                masker: Masker {
                    mode: d.mode.unwrap_or_default(),
                    replacement: d.replacement.clone(),
                    mask_char,
                    keep_first: d.keep_first.unwrap_or(0) as usize,
                    keep_last: d.keep_last.unwrap_or(0) as usize,
                    keep_pattern: pattern(i, "keepPattern", &d.keep_pattern)?,
                },
            });
        }
        Ok(RedactionSet {
            wire: directives,
            compiled,
        })
    }

    /// Compiles the JSON value of a rule's `redactions`.
    pub fn from_json(value: Value) -> Result<RedactionSet, RedactionError> {
        let directives: Vec<RedactionDirective> =
            serde_json::from_value(value).map_err(|e| RedactionError::Shape(e.to_string()))?;
        RedactionSet::compile(directives)
    }

    /// The directives as the wire shows them (`arg_redaction_rules`, `redaction_rules`).
    pub fn directives(&self) -> &[RedactionDirective] {
        &self.wire
    }

    /// Whether any directive can mask anything (names a field or a pattern).
    /// A `mask` without a usable directive is a `deny` (spec 4.2).
    pub fn is_usable(&self) -> bool {
        self.compiled
            .iter()
            .any(|c| c.field.is_some() || c.pattern.is_some())
    }

    /// Masks `value` in place and returns how many values were rewritten.
    pub fn apply(&self, value: &mut Value) -> Result<usize, RedactionError> {
        let mut count = 0;
        self.walk(value, 0, &mut count)?;
        Ok(count)
    }

    fn walk(
        &self,
        value: &mut Value,
        depth: usize,
        count: &mut usize,
    ) -> Result<(), RedactionError> {
        if depth > MAX_DEPTH {
            return Err(RedactionError::TooDeep);
        }
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    let whole = self
                        .compiled
                        .iter()
                        .find(|c| c.pattern.is_none() && c.field.as_deref() == Some(key));
                    if let Some(c) = whole {
                        mask_all(v, &c.masker, depth + 1, count)?;
                        continue;
                    }
                    for c in &self.compiled {
                        if let (Some(re), Some(f)) = (&c.pattern, &c.field)
                            && f == key
                        {
                            replace_all(v, re, &c.masker, depth + 1, count)?;
                        }
                    }
                    self.walk(v, depth + 1, count)?;
                }
            }
            Value::Array(items) => {
                for v in items {
                    self.walk(v, depth + 1, count)?;
                }
            }
            Value::String(s) => {
                for c in &self.compiled {
                    if let (Some(re), None) = (&c.pattern, &c.field)
                        && let Some(masked) = replace_text(re, s, &c.masker)
                    {
                        *s = masked;
                        *count += 1;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Masks every scalar under `value` as a whole.
fn mask_all(
    value: &mut Value,
    m: &Masker,
    depth: usize,
    count: &mut usize,
) -> Result<(), RedactionError> {
    if depth > MAX_DEPTH {
        return Err(RedactionError::TooDeep);
    }
    match value {
        Value::Null => {}
        Value::String(s) => {
            *s = m.mask(s);
            *count += 1;
        }
        Value::Bool(_) | Value::Number(_) => {
            *value = Value::String(m.mask(&value.to_string()));
            *count += 1;
        }
        Value::Array(items) => {
            for v in items {
                mask_all(v, m, depth + 1, count)?;
            }
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                mask_all(v, m, depth + 1, count)?;
            }
        }
    }
    Ok(())
}

/// Masks the matches of `re` in every string under `value`.
fn replace_all(
    value: &mut Value,
    re: &Regex,
    m: &Masker,
    depth: usize,
    count: &mut usize,
) -> Result<(), RedactionError> {
    if depth > MAX_DEPTH {
        return Err(RedactionError::TooDeep);
    }
    match value {
        Value::String(s) => {
            if let Some(masked) = replace_text(re, s, m) {
                *s = masked;
                *count += 1;
            }
        }
        Value::Bool(_) | Value::Number(_) => {
            let text = value.to_string();
            if let Some(masked) = replace_text(re, &text, m) {
                *value = Value::String(masked);
                *count += 1;
            }
        }
        Value::Array(items) => {
            for v in items {
                replace_all(v, re, m, depth + 1, count)?;
            }
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                replace_all(v, re, m, depth + 1, count)?;
            }
        }
        Value::Null => {}
    }
    Ok(())
}

fn replace_text(re: &Regex, text: &str, m: &Masker) -> Option<String> {
    if !re.is_match(text) {
        return None;
    }
    Some(
        re.replace_all(text, |caps: &regex::Captures<'_>| m.mask(&caps[0]))
            .into_owned(),
    )
}

impl Masker {
    /// Masks one matched text according to the directive's mode.
    fn mask(&self, text: &str) -> String {
        let c = self.mask_char.unwrap_or(DEFAULT_MASK_CHAR);
        match self.mode {
            MaskMode::Full => match (&self.replacement, self.mask_char) {
                (Some(r), _) => r.clone(),
                (None, Some(c)) => text.chars().map(|_| c).collect(),
                (None, None) => DEFAULT_REPLACEMENT.to_owned(),
            },
            MaskMode::Partial => {
                let n = text.chars().count();
                if self.keep_first + self.keep_last >= n {
                    // Keeping that much would reveal everything: mask it all.
                    return text.chars().map(|_| c).collect();
                }
                text.chars()
                    .enumerate()
                    .map(|(i, ch)| {
                        if i < self.keep_first || i >= n - self.keep_last {
                            ch
                        } else {
                            c
                        }
                    })
                    .collect()
            }
            MaskMode::Email => match text.split_once('@') {
                Some((local, domain)) if !local.is_empty() && !domain.is_empty() => {
                    let mut out = String::with_capacity(text.len());
                    let mut chars = local.chars();
                    out.extend(chars.next());
                    out.extend(chars.map(|_| c));
                    out.push('@');
                    out.push_str(domain);
                    out
                }
                // Not an address: nothing is safe to keep.
                _ => text.chars().map(|_| c).collect(),
            },
            MaskMode::Custom => {
                let mut out = String::with_capacity(text.len());
                let mut last = 0;
                if let Some(keep) = &self.keep_pattern {
                    for m in keep.find_iter(text) {
                        out.extend(text[last..m.start()].chars().map(|_| c));
                        out.push_str(m.as_str());
                        last = m.end();
                    }
                }
                out.extend(text[last..].chars().map(|_| c));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(v: Value) -> RedactionSet {
        RedactionSet::from_json(v).unwrap()
    }

    #[test]
    fn modes_mask_as_the_spec_describes() {
        let s = set(json!([
            {"field": "card", "mode": "partial", "keepLast": 4},
            {"field": "email", "mode": "email"},
            {"field": "phone", "mode": "custom", "keepPattern": "\\d{2}$"},
            {"field": "secret"},
            {"pattern": "tok_[a-z0-9]+", "replacement": "<tok>"}
        ]));
        let mut v = json!({
            "card": "4111111111111111",
            "nested": {"email": "jane.doe@example.com", "note": "use tok_abc123 now"},
            "phone": "555-0142",
            "secret": {"a": 1, "b": ["x", true]}
        });
        assert_eq!(s.apply(&mut v).unwrap(), 7);
        assert_eq!(
            v,
            json!({
                "card": "************1111",
                "nested": {"email": "j*******@example.com", "note": "use <tok> now"},
                "phone": "******42",
                "secret": {"a": "[REDACTED]", "b": ["[REDACTED]", "[REDACTED]"]}
            })
        );
    }

    #[test]
    fn field_and_pattern_masks_inside_that_field_only() {
        let s = set(json!([{"field": "note", "pattern": "\\d+", "maskChar": "#"}]));
        let mut v = json!({"note": "call 1234", "other": "call 1234"});
        s.apply(&mut v).unwrap();
        assert_eq!(v, json!({"note": "call ####", "other": "call 1234"}));
    }

    #[test]
    fn unusable_and_invalid_directives_are_told_apart() {
        assert!(!set(json!([{"mode": "full"}])).is_usable());
        assert!(set(json!([{"field": "x"}])).is_usable());
        assert!(matches!(
            RedactionSet::from_json(json!([{"pattern": "("}])),
            Err(RedactionError::Pattern { .. })
        ));
        assert!(matches!(
            RedactionSet::from_json(json!([{"field": "x", "maskChar": "ab"}])),
            Err(RedactionError::MaskChar(0))
        ));
        assert!(matches!(
            RedactionSet::from_json(json!({"field": "x"})),
            Err(RedactionError::Shape(_))
        ));
    }

    #[test]
    fn too_deep_values_fail_instead_of_passing() {
        let s = set(json!([{"field": "x"}]));
        let mut v = json!("leaf");
        for _ in 0..(MAX_DEPTH + 2) {
            v = json!({ "n": v });
        }
        assert_eq!(s.apply(&mut v), Err(RedactionError::TooDeep));
    }
}
