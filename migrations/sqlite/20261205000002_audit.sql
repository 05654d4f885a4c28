-- Every tool call a gate of the pipeline blocked (GET /v1/sessions/{id}/audit): which call, which
-- gate, why, and the call's input; kept until its session is deleted.
CREATE TABLE audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    run_id        TEXT NOT NULL,
    tool_use_id   TEXT NOT NULL,
    tool_name     TEXT NOT NULL,
    gate          TEXT NOT NULL,
    reason        TEXT NOT NULL,
    input         TEXT NOT NULL,
    created_at    TEXT NOT NULL
);
CREATE INDEX audit_by_session ON audit (session_id, id);
