-- The spend ledger: one row per model call (a CLI's run: one row for the run), written in the
-- commit that ends the run. Who paid (key, user, team), what was called, its tokens by kind,
-- whether a figure is an estimate, and its cost in billionths of a US dollar (NULL: the model has
-- no prices). Kept when the session is deleted: spend stays spent.
CREATE TABLE model_calls (
    run_id                  TEXT NOT NULL,
    seq                     INTEGER NOT NULL,
    at                      TEXT NOT NULL,
    session_id              TEXT NOT NULL,
    key_id                  TEXT,
    user_name               TEXT NOT NULL,
    team                    TEXT NOT NULL,
    provider                TEXT NOT NULL,
    model                   TEXT NOT NULL,
    input_tokens            INTEGER NOT NULL,
    output_tokens           INTEGER NOT NULL,
    cache_read_tokens       INTEGER NOT NULL,
    cache_write_tokens      INTEGER NOT NULL,
    input_tokens_estimated  INTEGER NOT NULL,
    output_tokens_estimated INTEGER NOT NULL,
    cost_nusd               INTEGER,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX model_calls_at ON model_calls (at);
CREATE INDEX model_calls_session ON model_calls (session_id);
