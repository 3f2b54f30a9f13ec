//! A borrowed view of a value during native evaluation.
//!
//! The native path never builds a regorus value: it looks at the request's own
//! strings and JSON in place. Equality and ordering follow regorus exactly
//! (derived `Ord` over `null < bool < number < string < array < set < object`,
//! numbers compared by value) so that the differential test can hold the two
//! paths to the same answers.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// A value seen by a native condition.
#[derive(Debug, Clone)]
pub(crate) enum Val<'a> {
    Null,
    Bool(bool),
    Num(Num),
    Str(Cow<'a, str>),
    Array(&'a [Value]),
    /// A set literal of the policy, kept sorted and deduplicated.
    Set(&'a [Value]),
    Object(&'a Map<String, Value>),
}

/// A number: integers exactly, everything else as `f64`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    pub(crate) fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::Int(i128::from(i))
        } else if let Some(u) = n.as_u64() {
            Num::Int(i128::from(u))
        } else {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // 2.0 and 2 are the same number in Rego.
            if f.fract() == 0.0 && f.abs() < 1e36 {
                Num::Int(f as i128)
            } else {
                Num::Float(f)
            }
        }
    }

    fn cmp(self, other: Num) -> Ordering {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (a, b) => a.as_f64().total_cmp(&b.as_f64()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl<'a> Val<'a> {
    /// Views a JSON value.
    pub(crate) fn of(v: &'a Value) -> Val<'a> {
        match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => Val::Num(Num::of(n)),
            Value::String(s) => Val::Str(Cow::Borrowed(s)),
            Value::Array(a) => Val::Array(a),
            Value::Object(o) => Val::Object(o),
        }
    }

    pub(crate) fn str(s: &'a str) -> Val<'a> {
        Val::Str(Cow::Borrowed(s))
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Val::Null => 0,
            Val::Bool(_) => 1,
            Val::Num(_) => 2,
            Val::Str(_) => 3,
            Val::Array(_) => 4,
            Val::Set(_) => 5,
            Val::Object(_) => 6,
        }
    }

    /// Regorus's total order over values.
    pub(crate) fn cmp(&self, other: &Val<'_>) -> Ordering {
        match (self, other) {
            (Val::Null, Val::Null) => Ordering::Equal,
            (Val::Bool(a), Val::Bool(b)) => a.cmp(b),
            (Val::Num(a), Val::Num(b)) => a.cmp(*b),
            (Val::Str(a), Val::Str(b)) => a.as_ref().cmp(b.as_ref()),
            (Val::Array(a), Val::Array(b)) | (Val::Set(a), Val::Set(b)) => cmp_seq(a, b),
            (Val::Object(a), Val::Object(b)) => cmp_objects(a, b),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    pub(crate) fn equals(&self, other: &Val<'_>) -> bool {
        self.cmp(other) == Ordering::Equal
    }

    /// Whether a bare expression statement with this value succeeds: any
    /// defined value but `false`.
    pub(crate) fn is_truthy(&self) -> bool {
        !matches!(self, Val::Bool(false))
    }

    /// `count(x)`: characters of a string, items of a collection.
    pub(crate) fn count(&self) -> Option<usize> {
        match self {
            Val::Str(s) => Some(s.chars().count()),
            Val::Array(a) | Val::Set(a) => Some(a.len()),
            Val::Object(o) => Some(o.len()),
            _ => None,
        }
    }

    /// `x in collection`: an array's or set's items, an object's values.
    pub(crate) fn contains_member(&self, item: &Val<'_>) -> Option<bool> {
        match self {
            Val::Array(a) => Some(a.iter().any(|v| Val::of(v).equals(item))),
            Val::Set(s) => Some(s.binary_search_by(|v| Val::of(v).cmp(item)).is_ok()),
            Val::Object(o) => Some(o.values().any(|v| Val::of(v).equals(item))),
            // Membership in a scalar is undefined in Rego: the statement fails.
            _ => None,
        }
    }
}

fn cmp_seq(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = Val::of(x).cmp(&Val::of(y));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

fn cmp_objects(a: &Map<String, Value>, b: &Map<String, Value>) -> Ordering {
    // Regorus objects are ordered maps compared entry by entry in key order.
    let mut ea: Vec<_> = a.iter().collect();
    let mut eb: Vec<_> = b.iter().collect();
    ea.sort_by(|x, y| x.0.cmp(y.0));
    eb.sort_by(|x, y| x.0.cmp(y.0));
    for ((ka, va), (kb, vb)) in ea.iter().zip(&eb) {
        let o = ka.cmp(kb).then_with(|| Val::of(va).cmp(&Val::of(vb)));
        if o != Ordering::Equal {
            return o;
        }
    }
    ea.len().cmp(&eb.len())
}

/// Sorts and deduplicates set items in the engine's value order.
pub(crate) fn normalize_set(items: &mut Vec<Value>) {
    items.sort_by(|a, b| Val::of(a).cmp(&Val::of(b)));
    items.dedup_by(|a, b| Val::of(a).equals(&Val::of(b)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_by_value_across_representations() {
        let (a, b) = (json!(2), json!(2.0));
        assert!(Val::of(&a).equals(&Val::of(&b)));
        let (c, d) = (json!(1.5), json!(2));
        assert_eq!(Val::of(&c).cmp(&Val::of(&d)), Ordering::Less);
    }

    #[test]
    fn types_order_like_regorus() {
        let vals = [
            json!(null),
            json!(true),
            json!(0),
            json!("a"),
            json!([1]),
            json!({}),
        ];
        for w in vals.windows(2) {
            assert_eq!(Val::of(&w[0]).cmp(&Val::of(&w[1])), Ordering::Less, "{w:?}");
        }
    }

    #[test]
    fn set_membership_uses_value_equality() {
        let mut items = vec![json!("b"), json!(1), json!("a"), json!(1.0)];
        normalize_set(&mut items);
        assert_eq!(items.len(), 3);
        let set = Val::Set(&items);
        assert_eq!(set.contains_member(&Val::str("a")), Some(true));
        assert_eq!(set.contains_member(&Val::Num(Num::Int(1))), Some(true));
        assert_eq!(set.contains_member(&Val::str("c")), Some(false));
        assert_eq!(Val::str("abc").contains_member(&Val::str("a")), None);
    }
}
