-- Issue 33: a task's files: (a JSON list of paths relative to its spec
-- directory, copied into its output/ before the tool starts).
ALTER TABLE tasks ADD COLUMN files TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN files TEXT NOT NULL DEFAULT '';
-- and its start_from: (inputs, dependencies, base; '' is inputs).
ALTER TABLE tasks ADD COLUMN start_from TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN start_from TEXT NOT NULL DEFAULT '';

-- The new columns take a version too (see 0019).
DROP TRIGGER task_version_update;
CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;
