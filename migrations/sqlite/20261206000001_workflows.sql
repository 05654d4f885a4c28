-- Workflows (POST /v1/workflows): every version of each, as its JSON definition. A deleted
-- workflow keeps its versions (the runs that ran them name them), with deleted_at set on all.
CREATE TABLE workflows (
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    deleted_at  TEXT,
    PRIMARY KEY (name, version)
);
