-- Signed POSTs to the configured webhook targets when runs end (GET /v1/webhooks/deliveries):
-- each delivery with its attempts, kept when delivered or given up, so that the queue survives a
-- restart and a client can see what was sent.
CREATE TABLE webhook_deliveries (
    id               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    target           TEXT NOT NULL,
    url              TEXT NOT NULL,
    body             TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    next_attempt_at  TEXT NOT NULL,
    last_status      BIGINT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (created_at);
