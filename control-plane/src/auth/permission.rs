//! Permissions (spec §5.6) and scopes (§5.3): closed sets, parsed at the edge.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// Parses the wire spelling.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// A fine-grained permission a management key carries (spec §5.6, plus
    /// the dashboard's key-management permissions).
    Permission {
        AllowAgentsView = "allow_agents:view",
        AllowAgentsCreate = "allow_agents:create",
        AllowAgentsUpdate = "allow_agents:update",
        AllowAgentsDelete = "allow_agents:delete",
        AllowRulesView = "allow_rules:view",
        AllowRulesCreate = "allow_rules:create",
        AllowRulesUpdate = "allow_rules:update",
        AllowRulesDelete = "allow_rules:delete",
        AllowHitlView = "allow_hitl:view",
        AllowHitlRespond = "allow_hitl:respond",
        AllowAuditLogView = "allow_audit_log:view",
        AllowCognitionView = "allow_cognition:view",
        AllowSettingsView = "allow_settings:view",
        AllowSettingsUpdate = "allow_settings:update",
        PayloadsUnmask = "payloads:unmask",
        RecallRulesView = "recall_rules:view",
        RecallRulesCreate = "recall_rules:create",
        RecallRulesUpdate = "recall_rules:update",
        RecallRulesDelete = "recall_rules:delete",
        RecallRulesBypass = "recall_rules:bypass",
        RecallAuditLogView = "recall_audit_log:view",
        RecallReceiptsView = "recall_receipts:view",
        RecordRecordsCreate = "record_records:create",
        RecordRecordsView = "record_records:view",
        RecordRecordsFinalize = "record_records:finalize",
        RecordAuditLogView = "record_audit_log:view",
        ApiKeysCreate = "api_keys:create",
        ApiKeysRotate = "api_keys:rotate",
        ApiKeysDelete = "api_keys:delete",
    }
}

string_enum! {
    /// A coarse scope (spec §5.3). `FullAccess` satisfies every requirement.
    Scope {
        RulesEvaluate = "rules:evaluate",
        RulesRead = "rules:read",
        RulesWrite = "rules:write",
        AllowWrite = "allow:write",
        AllowRead = "allow:read",
        RecallWrite = "recall:write",
        RecallRead = "recall:read",
        RecordWrite = "record:write",
        RecordRead = "record:read",
        CognitionRead = "cognition:read",
        FullAccess = "full_access",
    }
}

string_enum! {
    /// Who a key is for (spec 2.1), fixed at creation.
    Audience {
        Harness = "harness",
        Management = "management",
    }
}

string_enum! {
    /// The labelled environment of a key (spec 2.1); it only picks the prefix.
    Environment {
        Production = "production",
        Test = "test",
    }
}

/// Whether `granted` satisfies a route that accepts any of `accepted`
/// (an empty list accepts every key).
pub fn scopes_satisfy(granted: &[Scope], accepted: &[Scope]) -> bool {
    accepted.is_empty()
        || granted.contains(&Scope::FullAccess)
        || accepted.iter().any(|s| granted.contains(s))
}

/// The permissions in `wanted` that `held` lacks, in `wanted`'s order.
pub fn exceeded(held: &[Permission], wanted: &[Permission]) -> Vec<Permission> {
    wanted
        .iter()
        .filter(|p| !held.contains(p))
        .copied()
        .collect()
}

/// Parses a comma-separated list, with `all_word` meaning every value.
pub fn parse_list<T: Copy>(
    text: &str,
    all_word: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, String> {
    let text = text.trim();
    if text == all_word {
        return Ok(all.to_vec());
    }
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse(s).ok_or_else(|| format!("unknown value `{s}`")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_access_satisfies_every_route() {
        assert!(scopes_satisfy(&[Scope::FullAccess], &[Scope::RulesWrite]));
        assert!(scopes_satisfy(
            &[Scope::RecallWrite],
            &[Scope::RulesWrite, Scope::RecallWrite]
        ));
        assert!(!scopes_satisfy(&[Scope::AllowRead], &[Scope::RulesWrite]));
        assert!(scopes_satisfy(&[], &[]));
    }

    #[test]
    fn wire_spellings_round_trip() {
        for p in Permission::ALL {
            assert_eq!(Permission::parse(p.as_str()), Some(*p));
        }
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(*s));
        }
    }

    #[test]
    fn lists_parse_with_an_all_word() {
        let all = parse_list("all", "all", Permission::ALL, Permission::parse).unwrap();
        assert_eq!(all.len(), Permission::ALL.len());
        let two = parse_list(
            "api_keys:create, allow_rules:view",
            "all",
            Permission::ALL,
            Permission::parse,
        );
        assert_eq!(
            two.unwrap(),
            [Permission::ApiKeysCreate, Permission::AllowRulesView]
        );
        assert!(parse_list("nope", "all", Permission::ALL, Permission::parse).is_err());
    }
}
