-- The one rules collection behind /rules, /allow/rules and /recall/rules.
CREATE TABLE counters (
    org_id UUID NOT NULL REFERENCES organizations (id),
    name TEXT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE rules (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id),
    rule_code TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    natural_language TEXT,
    rego_source TEXT NOT NULL,
    effect TEXT NOT NULL,
    priority BIGINT NOT NULL,
    enabled BOOLEAN NOT NULL,
    applies_to TEXT NOT NULL,
    target_app TEXT,
    action_pattern TEXT,
    trust_tier TEXT,
    surface TEXT,
    principal_exclusions JSONB,
    bypass_active BOOLEAN NOT NULL,
    bypass_reason TEXT,
    bypass_activated_by TEXT,
    bypass_activated_at TIMESTAMPTZ,
    bypass_expires_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (org_id, rule_code)
);
CREATE INDEX rules_by_priority ON rules (org_id, priority DESC, created_at);
