-- The id of the trace a run's spans are in (32 lowercase hex digits) when runs are traced, to
-- join a run's record with its spans in a trace store. NULL: the run was not traced.
ALTER TABLE runs ADD COLUMN trace_id TEXT;
