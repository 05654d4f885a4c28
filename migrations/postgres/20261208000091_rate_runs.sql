-- The runs that hold a slot of a [[rate_limits]] rule's concurrent_runs on a fleet: one row per
-- run and rule, written when the run is admitted and deleted when it ends. A rule's count is its
-- rows on nodes whose heartbeat is current, so that the runs of a node that died stop counting
-- when its lease would have expired. Taken under a transaction-scoped advisory lock per rule, so
-- that two nodes admitting at once are counted one after the other. Unlogged, as rate_buckets:
-- after a crash of the database the counts start again from none.
CREATE UNLOGGED TABLE rate_runs (
    run_id      TEXT NOT NULL,
    bucket      TEXT NOT NULL,
    node_id     TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    PRIMARY KEY (run_id, bucket)
);
CREATE INDEX rate_runs_by_bucket ON rate_runs(bucket);
