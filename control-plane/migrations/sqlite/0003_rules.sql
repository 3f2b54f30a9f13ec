-- The one rules collection behind /rules, /allow/rules and /recall/rules.
CREATE TABLE counters (
    org_id BLOB NOT NULL REFERENCES organizations (id),
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE rules (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    rule_code TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    natural_language TEXT,
    rego_source TEXT NOT NULL,
    effect TEXT NOT NULL,
    priority INTEGER NOT NULL,
    enabled INTEGER NOT NULL,
    applies_to TEXT NOT NULL,
    target_app TEXT,
    action_pattern TEXT,
    trust_tier TEXT,
    surface TEXT,
    principal_exclusions TEXT,
    bypass_active INTEGER NOT NULL,
    bypass_reason TEXT,
    bypass_activated_by TEXT,
    bypass_activated_at TEXT,
    bypass_expires_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (org_id, rule_code)
);
CREATE INDEX rules_by_priority ON rules (org_id, priority DESC, created_at);
