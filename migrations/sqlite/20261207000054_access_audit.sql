-- Who did what with keys and who was refused (GET /v1/admin/audit): key creation, change and
-- revocation (by whom, which key, what changed; never a secret), and refused requests (the key id
-- if any, the route, the status and the reason). Refusals are written at a bounded rate.
CREATE TABLE access_audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    kind        TEXT NOT NULL,
    actor       TEXT,
    key_id      TEXT,
    route       TEXT,
    status      INTEGER,
    reason      TEXT,
    detail      TEXT
);
