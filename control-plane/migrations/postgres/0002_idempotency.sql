-- Idempotency keys (spec 8): one row per (credential, key), kept 24 hours.
CREATE TABLE idempotency (
    credential_id UUID NOT NULL,
    idem_key TEXT NOT NULL,
    org_id UUID NOT NULL REFERENCES organizations (id),
    request_hash TEXT NOT NULL,
    done BOOLEAN NOT NULL,
    status INTEGER,
    headers JSONB NOT NULL,
    body BYTEA NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (credential_id, idem_key)
);
CREATE INDEX idempotency_by_expiry ON idempotency (expires_at);
