-- Issue 23: retention. A run being pruned is recorded first (state
-- 'pruning': the intent), its node directories, files and rows are
-- removed, then the row says 'pruned'. A prune killed midway leaves the
-- intent for the next prune to finish; `runs` lists neither.
CREATE TABLE run_prunes (
    project TEXT NOT NULL,
    run     INTEGER NOT NULL,
    state   TEXT NOT NULL,
    at      TEXT NOT NULL,
    PRIMARY KEY (project, run)
) WITHOUT ROWID;

-- The event log stays append-only but for retention: the events of a run
-- recorded as being pruned may go.
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM run_prunes r WHERE r.project = OLD.project AND r.run = OLD.run)
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
