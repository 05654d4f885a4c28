-- The ends of runs not yet made into webhook deliveries: a row is written in the transaction
-- that ends its run (whatever ends it: the run itself, a drain, a restart's recovery, another
-- node's adoption), and a webhook worker of any node turns it into the deliveries its targets'
-- filters call for and removes it, in one transaction, so that no stop loses a run's end.
CREATE TABLE run_end_outbox (
    run_id      TEXT NOT NULL PRIMARY KEY,
    session_id  TEXT NOT NULL,
    ended_at    TEXT NOT NULL
);
CREATE INDEX run_end_outbox_by_time ON run_end_outbox (ended_at);
