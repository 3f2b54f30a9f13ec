//! Action classes from the verb in an action name (DESIGN §4).
//!
//! The name is split into words at `_`, `-`, `.`, `/`, `:`, spaces and
//! lower-to-upper case changes (`deleteRepo` → `delete`, `repo`); the first word
//! that is a known verb decides. Names with no known verb are `write`, the
//! class that is never silently treated as harmless.

use crate::model::ActionClass;

const READ: &[&str] = &[
    "get", "list", "read", "fetch", "search", "query", "find", "view", "show", "describe",
    "lookup", "retrieve", "download", "head", "watch", "stat", "count", "browse", "inspect",
    "check", "select", "scan", "load", "open", "peek", "preview", "export",
];
const DELETE: &[&str] = &[
    "delete",
    "remove",
    "destroy",
    "drop",
    "purge",
    "erase",
    "truncate",
    "wipe",
    "unlink",
    "rm",
    "del",
    "terminate",
    "discard",
    "clear",
];
const ADMIN: &[&str] = &[
    "admin",
    "administer",
    "grant",
    "revoke",
    "sudo",
    "chmod",
    "chown",
    "impersonate",
    "elevate",
    "promote",
    "demote",
    "provision",
    "deprovision",
    "shutdown",
    "reboot",
    "configure",
    "suspend",
    "ban",
    "unban",
    "disable",
    "enable",
    "rotate",
    "assume",
];
const WRITE: &[&str] = &[
    "create", "update", "write", "post", "put", "patch", "send", "set", "add", "insert", "upload",
    "edit", "modify", "save", "submit", "run", "execute", "exec", "invoke", "call", "start",
    "stop", "move", "copy", "rename", "publish", "commit", "merge", "push", "charge", "pay",
    "transfer", "approve", "reply", "comment", "book", "order", "deploy", "apply", "assign",
    "invite", "share", "archive", "restore", "import", "sync", "refund", "cancel",
];

/// The class of `action`.
pub fn classify(action: &str) -> ActionClass {
    let mut found = None;
    for_each_word(action, |word| {
        found = verb_class(word);
        found.is_some()
    });
    found.unwrap_or(ActionClass::Write)
}

fn verb_class(word: &str) -> Option<ActionClass> {
    // Verbs are short: lower-case into a stack buffer instead of allocating.
    let mut buf = [0u8; 16];
    let bytes = word.as_bytes();
    if bytes.len() > buf.len() {
        return None;
    }
    for (b, w) in buf.iter_mut().zip(bytes) {
        *b = w.to_ascii_lowercase();
    }
    let w = std::str::from_utf8(&buf[..bytes.len()]).ok()?;
    [
        (READ, ActionClass::Read),
        (DELETE, ActionClass::Delete),
        (ADMIN, ActionClass::Admin),
        (WRITE, ActionClass::Write),
    ]
    .into_iter()
    .find(|(list, _)| list.contains(&w))
    .map(|(_, class)| class)
}

/// Calls `f` on each word of an identifier (split at separators and camelCase
/// boundaries) until it returns true.
fn for_each_word(s: &str, mut f: impl FnMut(&str) -> bool) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for i in 0..bytes.len() {
        let b = bytes[i];
        let boundary = if !b.is_ascii_alphanumeric() {
            Some((i, i + 1))
        } else if i > start && b.is_ascii_uppercase() && bytes[i - 1].is_ascii_lowercase() {
            Some((i, i))
        } else {
            None
        };
        if let Some((end, next)) = boundary {
            if start < end && f(&s[start..end]) {
                return;
            }
            start = next;
        }
    }
    if start < s.len() {
        f(&s[start..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_decide_the_class() {
        let cases = [
            ("get_user", ActionClass::Read),
            ("listFiles", ActionClass::Read),
            ("repos.delete", ActionClass::Delete),
            ("bulk_remove_users", ActionClass::Delete),
            ("grant_role", ActionClass::Admin),
            ("create_charge", ActionClass::Write),
            ("frobnicate", ActionClass::Write),
            ("", ActionClass::Write),
            ("DeleteRepo", ActionClass::Delete),
        ];
        for (action, class) in cases {
            assert_eq!(classify(action), class, "{action}");
        }
    }
}
