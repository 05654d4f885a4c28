-- The token buckets of [[rate_limits]] rules that a fleet's nodes share: one row per rule and
-- kind (requests or tokens per minute), taken from and refilled by one UPDATE that also says
-- whether the take was granted, so that a request costs one round trip per rule. A single node
-- keeps its buckets in memory and never writes here.
-- UNLOGGED: a take writes no WAL and waits for no flush (the rows are hot: every counted request
-- of a rule updates the same one). What that gives up is harmless: after a crash of the database
-- (or on a standby it fails over to) the buckets start again full.
CREATE UNLOGGED TABLE rate_buckets (
    key         TEXT PRIMARY KEY,
    tokens      DOUBLE PRECISION NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    granted     BOOLEAN NOT NULL DEFAULT TRUE
);
