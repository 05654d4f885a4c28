-- Budgets (docs/spend.md, "Budgets"): at most what a key, a user or a team may spend over a
-- period. Amounts are whole nano-dollars, so that a reservation and its reconciliation add and
-- subtract exactly. A budget's row also holds what its scope spent in the period that started at
-- period_start and what the model calls under way have reserved: every node reserves and
-- reconciles by one atomic UPDATE of this row, so a budget holds across a fleet.
-- warned_period is the period_start of the last period its soft limit was announced in (once per
-- period, whichever node crosses it first). Timestamps are RFC 3339 text in UTC.
CREATE TABLE budgets (
    id             TEXT PRIMARY KEY NOT NULL,
    scope_kind     TEXT NOT NULL,
    scope_name     TEXT NOT NULL,
    period         TEXT NOT NULL,
    max_nusd       INTEGER NOT NULL,
    soft_nusd      INTEGER,
    source         TEXT NOT NULL,
    period_start   TEXT NOT NULL,
    spent_nusd     INTEGER NOT NULL DEFAULT 0,
    reserved_nusd  INTEGER NOT NULL DEFAULT 0,
    warned_period  TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE INDEX budgets_by_scope ON budgets (scope_kind, scope_name);
