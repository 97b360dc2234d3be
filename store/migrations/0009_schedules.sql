-- Schedules (issue 14): what `dispatch serve` records of each project with
-- a schedule: in project.yaml: whether it is enabled, when its next run is
-- due, its last scheduled run and how it ended, failures in a row (the
-- backoff), and the skips and catch-ups it made.
CREATE TABLE schedules (
    project     TEXT PRIMARY KEY,
    enabled     INTEGER NOT NULL DEFAULT 1,
    spec        TEXT NOT NULL DEFAULT '',
    next_at     TEXT NOT NULL DEFAULT '',
    last_at     TEXT NOT NULL DEFAULT '',
    last_run    INTEGER NOT NULL DEFAULT 0,
    last_result TEXT NOT NULL DEFAULT '',
    failures    INTEGER NOT NULL DEFAULT 0,
    skipped     INTEGER NOT NULL DEFAULT 0,
    catch_ups   INTEGER NOT NULL DEFAULT 0,
    updated_at  TEXT NOT NULL DEFAULT ''
);
