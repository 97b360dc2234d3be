-- Issue 24: every change to a task row gives it a new version, unique in
-- the database (task_version counts them), so that the controller keeps the
-- rows it read and a tick reads again only those that changed: a steady
-- tick with 1,000 running tasks reads their versions, not their rows.
ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

CREATE TABLE task_version (n INTEGER NOT NULL);
INSERT INTO task_version (n) VALUES (0);

-- A row inserted, or written in any column but heartbeat and heartbeat_at,
-- takes the next version. Every write sets updated_at, which is listed,
-- but one: a tick writes the heartbeats of every running task in one
-- statement that leaves updated_at alone (Tx.Beats) and changes the rows
-- it holds the same way itself, so that a heartbeat costs neither a
-- version nor a read. A column added to tasks later must be added to this
-- list (store:TestTaskVersionsCoverEveryColumn).
-- The trigger's own UPDATE sets version only, so it does not fire again.
CREATE TRIGGER task_version_insert AFTER INSERT ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

UPDATE tasks SET version = rowid;
UPDATE task_version SET n = (SELECT COALESCE(MAX(version), 0) FROM tasks);

-- The attempts that run, by api_mode: every tick counts them, and the
-- attempts of a long project pile up.
CREATE INDEX attempts_live ON attempts(api_mode) WHERE status IN ('claimed', 'running');
