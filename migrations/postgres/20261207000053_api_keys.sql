-- API keys (POST /v1/admin/keys): one row per key, found by its public id (the primary key; the
-- middleware never scans). Only the SHA-256 of the secret is kept (docs/security.md, "API keys").
-- Timestamps are RFC 3339 text in UTC, like every other table's.
CREATE TABLE api_keys (
    id           TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    name         TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    team         TEXT NOT NULL,
    role         TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    updated_at   TEXT NOT NULL
);
