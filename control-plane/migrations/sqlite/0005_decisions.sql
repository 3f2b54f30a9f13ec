-- Decisions, persisted with their payloads masked at rest (spec 2.5, 2.6).
CREATE TABLE action_decisions (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    agent_id TEXT NOT NULL,
    target_app TEXT NOT NULL,
    action TEXT NOT NULL,
    context TEXT NOT NULL,
    decision TEXT NOT NULL,
    would_decide TEXT,
    reason TEXT NOT NULL,
    reason_code TEXT,
    rule_id BLOB,
    rule_code TEXT,
    enforced INTEGER NOT NULL,
    agent_mode TEXT NOT NULL,
    floor_detectors TEXT NOT NULL,
    source TEXT NOT NULL,
    hitl_result TEXT,
    hitl_responded_at TEXT,
    hitl_responded_by TEXT,
    execution_result TEXT,
    execution_completed_at TEXT,
    execution_details TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX action_decisions_by_org ON action_decisions (org_id, created_at);

CREATE TABLE retrieval_decisions (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    agent_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_metadata TEXT NOT NULL,
    query TEXT,
    surface TEXT,
    trust_tier TEXT,
    decision TEXT NOT NULL,
    would_decide TEXT,
    reason TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    rule_id BLOB,
    enforced INTEGER NOT NULL,
    agent_mode TEXT NOT NULL,
    floor_detectors TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX retrieval_decisions_by_org ON retrieval_decisions (org_id, created_at);
