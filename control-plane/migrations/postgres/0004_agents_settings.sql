-- Per-organization settings and agents. The fields no query filters on live
-- in a JSON document (`doc`) that the application types.
CREATE TABLE settings (
    org_id UUID PRIMARY KEY REFERENCES organizations (id),
    id UUID NOT NULL,
    doc TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE agents (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id),
    agent_id TEXT NOT NULL,
    -- NULL: the agent inherits the organization's default_agent_mode.
    mode TEXT,
    doc TEXT NOT NULL,
    -- Set by DELETE: the agent is shut down (terminal bundle) until created again.
    deleted_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, agent_id)
);
CREATE INDEX agents_by_created ON agents (org_id, created_at);
