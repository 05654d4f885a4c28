-- Sessions, runs, chat messages and the event log. Timestamps are RFC 3339 UTC text with
-- milliseconds, so that they sort as text.

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    engine          TEXT NOT NULL,
    title           TEXT,
    provider_id     TEXT,
    model           TEXT,
    cli_backend     TEXT,
    project_path    TEXT,
    agent_id        TEXT,
    system_prompt   TEXT,
    permission_mode TEXT,
    engine_config   TEXT NOT NULL DEFAULT '{}',
    cli_session_id  TEXT,
    -- Highest event seq that may have been handed out (see docs/events.md, "seq").
    event_seq_reserved INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'idle',
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

CREATE TABLE runs (
    id            TEXT PRIMARY KEY NOT NULL,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status        TEXT NOT NULL,
    finish_reason TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    iterations    INTEGER NOT NULL DEFAULT 0,
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    error         TEXT,
    -- The client's idempotency key of the prompt that started the run.
    client_msg_id TEXT
);
CREATE UNIQUE INDEX runs_by_client_msg ON runs(session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
CREATE INDEX runs_by_client_msg_any ON runs(client_msg_id) WHERE client_msg_id IS NOT NULL;
CREATE INDEX runs_by_session ON runs(session_id, started_at);
CREATE INDEX runs_by_status ON runs(status);

-- rowid order is insertion order: the latest message of a session is its highest rowid.
CREATE TABLE messages (
    id            TEXT PRIMARY KEY NOT NULL,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    run_id        TEXT,
    parent_id     TEXT,
    role          TEXT NOT NULL,
    blocks        TEXT NOT NULL,
    model         TEXT,
    input_tokens  INTEGER,
    output_tokens INTEGER,
    client_msg_id TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id);
CREATE INDEX messages_by_run ON messages(run_id);
CREATE UNIQUE INDEX messages_by_client_msg ON messages(session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;

-- payload is the whole event envelope as sent on the stream.
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    run_id     TEXT,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
