-- The event log in append order: a rowid table, whose rows land at its end in commit order, with a
-- unique index on (session_id, seq) for replay. The table it replaces was clustered by
-- (session_id, seq): a commit carrying events of many sessions rewrote one 4 KB page per session
-- for a few hundred bytes each (docs/benchmarks.md).
CREATE TABLE events_appended (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    run_id     TEXT,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
INSERT INTO events_appended (session_id, seq, run_id, type, payload, created_at)
    SELECT session_id, seq, run_id, type, payload, created_at FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_appended RENAME TO events;
CREATE UNIQUE INDEX events_by_session_seq ON events(session_id, seq);
