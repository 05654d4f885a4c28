-- sessions.status was written at every run's start and end and never read: whether a session is
-- running is known only to the daemon that runs it (its map of active runs), which GET
-- /v1/sessions reports; a stored copy could only go stale (a killed daemon left it 'running').
ALTER TABLE sessions DROP COLUMN status;
