-- Idempotency keys (spec 8): one row per (credential, key), kept 24 hours.
CREATE TABLE idempotency (
    credential_id BLOB NOT NULL,
    idem_key TEXT NOT NULL,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    request_hash TEXT NOT NULL,
    done INTEGER NOT NULL,
    status INTEGER,
    headers TEXT NOT NULL,
    body BLOB NOT NULL,
    started_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (credential_id, idem_key)
);
CREATE INDEX idempotency_by_expiry ON idempotency (expires_at);
