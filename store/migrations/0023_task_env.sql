-- Issue 23: a task's env (front matter env:, a JSON object of the values as
-- written: a ${VAR} is expanded from the controller's environment at each
-- launch and never stored expanded) and its retry_backoff (0: the
-- controller's).
ALTER TABLE tasks ADD COLUMN env TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN retry_backoff_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE run_tasks ADD COLUMN env TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN retry_backoff_seconds REAL NOT NULL DEFAULT 0;

-- The new columns take a version too (see 0019).
DROP TRIGGER task_version_update;
CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;
