-- Per-organization settings and agents. The fields no query filters on live
-- in a JSON document (`doc`) that the application types.
CREATE TABLE settings (
    org_id BLOB PRIMARY KEY REFERENCES organizations (id),
    id BLOB NOT NULL,
    doc TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE agents (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    agent_id TEXT NOT NULL,
    -- NULL: the agent inherits the organization's default_agent_mode.
    mode TEXT,
    doc TEXT NOT NULL,
    -- Set by DELETE: the agent is shut down (terminal bundle) until created again.
    deleted_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (org_id, agent_id)
);
CREATE INDEX agents_by_created ON agents (org_id, created_at);
