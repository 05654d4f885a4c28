-- Run-end deliveries are queued and sent per target (its name and URL): the pending ones of one
-- target are counted and picked by this index.
CREATE INDEX webhook_deliveries_by_target ON webhook_deliveries (target, url, status);

-- The delivery ids of inbound hooks (POST /v1/hooks/{name}) received within the timestamp
-- tolerance: a replayed delivery is refused by its id until its signed timestamp is too old to
-- pass anyway (expires_at). In the store so that every node of a fleet refuses it.
CREATE TABLE hook_deliveries_seen (
    hook        TEXT NOT NULL,
    id          TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    PRIMARY KEY (hook, id)
);
CREATE INDEX hook_deliveries_seen_expiry ON hook_deliveries_seen (expires_at);
