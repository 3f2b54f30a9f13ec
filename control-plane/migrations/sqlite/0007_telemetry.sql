-- App/action pairs seen in telemetry (for `new_schemas`).
CREATE TABLE telemetry_schemas (
    org_id BLOB NOT NULL REFERENCES organizations (id),
    target_app TEXT NOT NULL,
    action TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    PRIMARY KEY (org_id, target_app, action)
);
