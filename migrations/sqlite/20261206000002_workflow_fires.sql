-- The latest fire time of each scheduled workflow that a node claimed (and ran, or skipped as
-- missed): a fire time is claimed once, by one node, across restarts.
CREATE TABLE workflow_fires (
    name        TEXT NOT NULL PRIMARY KEY,
    last_fire   TEXT NOT NULL
);
