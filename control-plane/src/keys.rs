//! The key lifecycle of spec 3.1, shared by the HTTP API and the CLI:
//! create, rotate with grace, revoke, self-revoke, each with its audit entry.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::{self, Audience, Environment, Permission, Scope};
use crate::error::ApiError;
use crate::store::{ApiKey, AuditEntry, KeyId, NewKey, OrgId, Retire, Store};

/// Lifetimes a key may be created with (spec 2.1; default 90 days).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum Expiry {
    #[serde(rename = "30d")]
    Days30,
    #[default]
    #[serde(rename = "90d")]
    Days90,
    #[serde(rename = "180d")]
    Days180,
    #[serde(rename = "1y")]
    Year,
    #[serde(rename = "never")]
    Never,
}

impl Expiry {
    pub fn parse(text: &str) -> Option<Expiry> {
        serde_json::from_value(json!(text)).ok()
    }

    /// The expiry of a key created at `now`.
    pub fn at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let days = match self {
            Expiry::Days30 => 30,
            Expiry::Days90 => 90,
            Expiry::Days180 => 180,
            Expiry::Year => 365,
            Expiry::Never => return None,
        };
        Some(now + TimeDelta::days(days))
    }
}

/// How long a rotated key keeps working (spec 3.1; default 24 hours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum Grace {
    #[serde(rename = "immediate")]
    Immediate,
    #[serde(rename = "1h")]
    Hour,
    #[default]
    #[serde(rename = "24h")]
    Day,
    #[serde(rename = "7d")]
    Week,
}

impl Grace {
    pub fn parse(text: &str) -> Option<Grace> {
        serde_json::from_value(json!(text)).ok()
    }

    fn length(self) -> TimeDelta {
        match self {
            Grace::Immediate => TimeDelta::zero(),
            Grace::Hour => TimeDelta::hours(1),
            Grace::Day => TimeDelta::hours(24),
            Grace::Week => TimeDelta::days(7),
        }
    }
}

/// What a new key should be.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub name: String,
    pub audience: Audience,
    pub environment: Environment,
    pub permissions: Vec<Permission>,
    pub scopes: Vec<Scope>,
    pub expiry: Expiry,
    pub agent_id: Option<String>,
    /// A caller-chosen plaintext (custom agent keys); generated when `None`.
    pub plaintext: Option<String>,
}

/// A key as just created or rotated: the row and the plaintext, shown once.
#[derive(Debug)]
pub struct Issued {
    pub key: ApiKey,
    pub plaintext: String,
}

/// An audit entry about key `target` (the store fills an empty `target`
/// with the id of the key it inserts). Never the plaintext or the hash.
fn audit(
    action: &str,
    actor: Option<&ApiKey>,
    target: Option<KeyId>,
    key: &NewKey,
    now: DateTime<Utc>,
) -> AuditEntry {
    AuditEntry {
        org: key.org,
        action: action.to_owned(),
        actor: actor.map(|a| a.id),
        target_type: "api_key".into(),
        target_id: target.map(|t| t.0.to_string()).unwrap_or_default(),
        details: json!({
            "name": key.name,
            "display": key.display,
            "audience": key.audience,
            "permissions": key.permissions,
            "via": if actor.is_some() { "api" } else { "cli" },
        }),
        at: now,
    }
}

/// The fields of an existing key, as the audit entry describes it.
fn described(key: &ApiKey) -> NewKey {
    NewKey {
        org: key.org,
        name: key.name.clone(),
        hash: String::new(),
        display: key.display.clone(),
        audience: key.audience,
        environment: key.environment,
        permissions: key.permissions.clone(),
        scopes: key.scopes.clone(),
        agent_id: key.agent_id.clone(),
        created_by: key.created_by,
        expires_at: key.expires_at,
    }
}

/// A new secret: agent keys get the `allow_` prefix, others their
/// environment's.
fn secret_for(agent: bool, environment: Environment) -> auth::NewSecret {
    auth::generate(if agent {
        auth::AGENT_KEY_PREFIX
    } else {
        auth::prefix(environment)
    })
}

/// Creates a key in `org`. `creator` is the calling key (`None` for the
/// CLI, which acts as the operator): it may grant only what it holds.
pub async fn create(
    store: &dyn Store,
    org: OrgId,
    creator: Option<&ApiKey>,
    spec: KeySpec,
    now: DateTime<Utc>,
) -> Result<Issued, ApiError> {
    if let Some(creator) = creator {
        let over = auth::exceeded(&creator.permissions, &spec.permissions);
        if !over.is_empty() {
            return Err(ApiError::ExceededPermissions(
                "Cannot grant permissions you do not hold",
                over,
            ));
        }
        if !spec
            .scopes
            .iter()
            .all(|s| auth::scopes_satisfy(&creator.scopes, &[*s]))
        {
            return Err(ApiError::InsufficientScope {
                required: spec.scopes.clone(),
                granted: creator.scopes.clone(),
            });
        }
    }
    let secret = match spec.plaintext {
        Some(p) => auth::custom(p),
        None => secret_for(spec.agent_id.is_some(), spec.environment),
    };
    let new = NewKey {
        org,
        name: spec.name,
        hash: secret.hash.clone(),
        display: secret.display.clone(),
        audience: spec.audience,
        environment: spec.environment,
        permissions: spec.permissions,
        scopes: spec.scopes,
        agent_id: spec.agent_id,
        created_by: creator.map(|c| c.id),
        expires_at: spec.expiry.at(now),
    };
    let entry = audit("API_KEY_CREATED", creator, None, &new, now);
    let key = store.create_key(new, entry, now).await?;
    Ok(Issued {
        key,
        plaintext: secret.plaintext,
    })
}

/// Rotates `old`: a new secret with the same name, audience, permissions,
/// scopes and expiry; the old key keeps working for `grace` (never past its
/// own expiry; at once if it had already expired).
pub async fn rotate(
    store: &dyn Store,
    old: &ApiKey,
    rotator: Option<&ApiKey>,
    grace: Grace,
    now: DateTime<Utc>,
) -> Result<Issued, ApiError> {
    if let Some(rotator) = rotator {
        let over = auth::exceeded(&rotator.permissions, &old.permissions);
        if !over.is_empty() {
            return Err(ApiError::ExceededPermissions(
                "Cannot rotate a key more powerful than you",
                over,
            ));
        }
    }
    if old.revoked_at.is_some() || old.replaced_by.is_some() {
        return Err(ApiError::Conflict(
            "the key is revoked or already rotated".into(),
        ));
    }
    let already_expired = old.expires_at.is_some_and(|t| t <= now);
    let grace_end = now + grace.length();
    let retire = Retire {
        expires_at: old.expires_at.map_or(grace_end, |t| t.min(grace_end)),
        revoke: already_expired,
    };
    let secret = secret_for(old.agent_id.is_some(), old.environment);
    let new = NewKey {
        hash: secret.hash.clone(),
        display: secret.display.clone(),
        created_by: rotator.map(|r| r.id).or(old.created_by),
        ..described(old)
    };
    let mut entry = audit(
        "API_KEY_ROTATED",
        rotator,
        Some(old.id),
        &described(old),
        now,
    );
    entry.details["grace"] = json!(grace);
    let key = store
        .rotate_key(old.org, old.id, new, retire, entry, now)
        .await?;
    Ok(Issued {
        key,
        plaintext: secret.plaintext,
    })
}

/// Revokes `target` on behalf of `revoker` (`None`: the CLI). A management
/// key may be revoked only by a holder of all its permissions or its creator.
pub async fn revoke(
    store: &dyn Store,
    target: &ApiKey,
    revoker: Option<&ApiKey>,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    if let Some(revoker) = revoker
        && target.audience == Audience::Management
        && target.created_by != Some(revoker.id)
        && revoker.id != target.id
    {
        let over = auth::exceeded(&revoker.permissions, &target.permissions);
        if !over.is_empty() {
            return Err(ApiError::ExceededPermissions(
                "Cannot revoke a key more powerful than you",
                over,
            ));
        }
    }
    if !store.revoke_key(target.org, target.id, now).await? {
        return Err(ApiError::Conflict("the key is already revoked".into()));
    }
    // The key is dead before the audit write: a failed write must not leave
    // a revoked-on-request key alive (spec 3.1).
    let entry = audit(
        "API_KEY_REVOKED",
        revoker,
        Some(target.id),
        &described(target),
        now,
    );
    if let Err(e) = store.append_audit(entry).await {
        tracing::error!(error = %e, "audit write failed after revocation");
        return Err(ApiError::InternalMessage(
            "API key revoked, but the audit write failed: the key is already dead",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_as_the_cli_and_api_spell_them() {
        assert_eq!(Expiry::parse("1y"), Some(Expiry::Year));
        assert_eq!(Expiry::parse("never"), Some(Expiry::Never));
        assert_eq!(Expiry::parse("2y"), None);
        assert_eq!(Grace::parse("immediate"), Some(Grace::Immediate));
        assert_eq!(Grace::default(), Grace::Day);
        let now = DateTime::from_timestamp(0, 0).unwrap();
        assert_eq!(Expiry::default().at(now), Some(now + TimeDelta::days(90)));
        assert_eq!(Expiry::Never.at(now), None);
    }
}
