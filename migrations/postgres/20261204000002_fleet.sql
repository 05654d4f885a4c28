-- The fleet's tables (PostgreSQL only: a SQLite database is never shared by nodes, so the SQLite
-- migrations have no counterpart). Times are the database server's clock (timestamptz, now()),
-- never a node's, so that nodes whose clocks differ agree on when a lease has expired.

-- One row per node that has run with [cluster], refreshed by its heartbeat.
CREATE TABLE nodes (
    id           TEXT COLLATE "C" PRIMARY KEY,
    address      TEXT NOT NULL,
    version      TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    draining     BOOLEAN NOT NULL DEFAULT FALSE
);

-- The owner of a session being run: only that node appends to its log and writes its runs, and
-- only while the epoch is the one it claimed (a node that adopts the session bumps it, which
-- fences the old owner's writes). A lease ends with the session's last unfinished run.
CREATE TABLE session_leases (
    session_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    node_id    TEXT COLLATE "C" NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX session_leases_by_node ON session_leases(node_id);
