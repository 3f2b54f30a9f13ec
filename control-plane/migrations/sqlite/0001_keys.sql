-- Organizations, API keys and the audit log.
CREATE TABLE organizations (
    id BLOB PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE api_keys (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    display TEXT NOT NULL,
    audience TEXT NOT NULL,
    environment TEXT NOT NULL,
    permissions TEXT NOT NULL,
    scopes TEXT NOT NULL,
    agent_id TEXT,
    created_by BLOB,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT,
    replaced_by BLOB,
    last_used_at TEXT
);
CREATE INDEX api_keys_by_org ON api_keys (org_id, created_at);

CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    action TEXT NOT NULL,
    actor BLOB,
    target_type TEXT NOT NULL,
    target_id TEXT NOT NULL,
    details TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX audit_log_by_org ON audit_log (org_id, seq);
