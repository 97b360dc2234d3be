-- Issue 33 item 1: stacked work in git projects. A task's on_conflict:
-- (markers, fail; '' is markers) says what a conflict between its
-- dependencies' results does, and an attempt records the commit it
-- started on (its dependencies' results merged onto the base; '' when it
-- is its task's base_commit), which its result must be one commit on.
ALTER TABLE tasks ADD COLUMN on_conflict TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN on_conflict TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN base_commit TEXT NOT NULL DEFAULT '';

-- The new column takes a version too (see 0019).
DROP TRIGGER task_version_update;
CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;
