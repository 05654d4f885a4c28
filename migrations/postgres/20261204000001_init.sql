-- The PostgreSQL schema: the same tables and meanings as migrations/sqlite after all of its
-- migrations, in one step. A schema change is made in both folders in the same commit.
--
-- Ids are UUIDv7 text and timestamps RFC 3339 UTC text with milliseconds, as on SQLite, so that
-- both backends read and write the same values. Ids collate bytewise ("C"): their text order is
-- creation order, which paging relies on, whatever the database's locale.

CREATE TABLE sessions (
    id              TEXT COLLATE "C" PRIMARY KEY,
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
    event_seq_reserved BIGINT NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

-- rid: insertion order (SQLite's rowid), for "a session's first run".
CREATE TABLE runs (
    rid           BIGINT GENERATED ALWAYS AS IDENTITY,
    id            TEXT COLLATE "C" PRIMARY KEY,
    session_id    TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status        TEXT NOT NULL,
    finish_reason TEXT,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    iterations    BIGINT NOT NULL DEFAULT 0,
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    error         TEXT,
    -- The client's idempotency key of the prompt that started the run.
    client_msg_id TEXT
);
CREATE UNIQUE INDEX runs_by_client_msg ON runs(session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
CREATE INDEX runs_by_client_msg_any ON runs(client_msg_id) WHERE client_msg_id IS NOT NULL;
CREATE INDEX runs_by_session ON runs(session_id, rid);
CREATE INDEX runs_unfinished ON runs(status) WHERE status IN ('running', 'queued');

-- rid: insertion order; the latest message of a session is its highest rid.
CREATE TABLE messages (
    rid           BIGINT GENERATED ALWAYS AS IDENTITY,
    id            TEXT COLLATE "C" PRIMARY KEY,
    session_id    TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    run_id        TEXT COLLATE "C",
    parent_id     TEXT COLLATE "C",
    role          TEXT NOT NULL,
    blocks        TEXT NOT NULL,
    model         TEXT,
    input_tokens  BIGINT,
    output_tokens BIGINT,
    client_msg_id TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, rid);
CREATE INDEX messages_by_run ON messages(run_id, rid);
CREATE UNIQUE INDEX messages_by_client_msg ON messages(session_id, client_msg_id)
    WHERE client_msg_id IS NOT NULL;

-- The event log. payload is the whole event envelope as sent on the stream, or, for a merged row
-- of consecutive streamDelta events of one run (last_seq not NULL), one line per event (see
-- docs/events.md, "Durability"). Merged rows never overlap: the row holding a seq is the one with
-- the highest first seq at or below it.
CREATE TABLE events (
    session_id TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    run_id     TEXT COLLATE "C",
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_seq   BIGINT,
    PRIMARY KEY (session_id, seq)
);
