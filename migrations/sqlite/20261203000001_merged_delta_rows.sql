-- A run of consecutive streamDelta events of one run that share a commit may be stored as one row:
-- seq is its first event's seq, last_seq its last one's, and payload holds each event's time, kind
-- and text, one line per event (docs/events.md, "Durability"). last_seq is NULL for a row of one
-- event, whose payload is the envelope as sent, as before: rows written earlier read as they did.
-- The unique index on (session_id, seq) stays: merged rows never overlap, and the row holding a
-- seq is the one with the highest first seq at or below it.
ALTER TABLE events ADD COLUMN last_seq INTEGER;
