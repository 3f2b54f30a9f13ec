-- The human-in-the-loop queue (spec 2.8, 3.3).
CREATE TABLE hitl_items (
    id BLOB PRIMARY KEY,
    org_id BLOB NOT NULL REFERENCES organizations (id),
    decision_id BLOB,
    agent_id TEXT NOT NULL,
    target_app TEXT NOT NULL,
    action TEXT NOT NULL,
    context TEXT NOT NULL,
    category TEXT NOT NULL,
    status TEXT NOT NULL,
    ai_recommended_rule TEXT,
    notified_via TEXT NOT NULL,
    resolution TEXT,
    dedupe_key TEXT,
    expires_at TEXT,
    responded_at TEXT,
    responded_by TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX hitl_by_status ON hitl_items (org_id, status, created_at);
CREATE UNIQUE INDEX hitl_dedupe ON hitl_items (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
