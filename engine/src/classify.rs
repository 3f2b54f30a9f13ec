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
    words(action)
        .find_map(|w| {
            let w = w.to_ascii_lowercase();
            let w = w.as_str();
            if READ.contains(&w) {
                Some(ActionClass::Read)
            } else if DELETE.contains(&w) {
                Some(ActionClass::Delete)
            } else if ADMIN.contains(&w) {
                Some(ActionClass::Admin)
            } else if WRITE.contains(&w) {
                Some(ActionClass::Write)
            } else {
                None
            }
        })
        .unwrap_or(ActionClass::Write)
}

/// Splits an identifier into words at separators and camelCase boundaries.
fn words(s: &str) -> impl Iterator<Item = &str> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..bytes.len() {
        let b = bytes[i];
        if !b.is_ascii_alphanumeric() {
            if start < i {
                out.push(&s[start..i]);
            }
            start = i + 1;
        } else if i > start && b.is_ascii_uppercase() && bytes[i - 1].is_ascii_lowercase() {
            out.push(&s[start..i]);
            start = i;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out.into_iter()
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
