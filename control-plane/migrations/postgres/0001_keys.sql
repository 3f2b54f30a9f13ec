-- Organizations, API keys and the audit log.
CREATE TABLE organizations (
    id UUID PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id),
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    display TEXT NOT NULL,
    audience TEXT NOT NULL,
    environment TEXT NOT NULL,
    permissions JSONB NOT NULL,
    scopes JSONB NOT NULL,
    agent_id TEXT,
    created_by UUID,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ,
    replaced_by UUID,
    last_used_at TIMESTAMPTZ
);
CREATE INDEX api_keys_by_org ON api_keys (org_id, created_at);

CREATE TABLE audit_log (
    seq BIGSERIAL PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id),
    action TEXT NOT NULL,
    actor UUID,
    target_type TEXT NOT NULL,
    target_id TEXT NOT NULL,
    details JSONB NOT NULL,
    at TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_log_by_org ON audit_log (org_id, seq);
