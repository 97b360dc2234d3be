-- Issue 37: preemption. not_preemptible is preemptible: false (front
-- matter, project.yaml): no more urgent task stops it. preemptions counts
-- the attempts a more urgent task stopped, which use no retry: a task
-- preempted 3 times is no longer preempted.
ALTER TABLE tasks ADD COLUMN not_preemptible INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_tasks ADD COLUMN not_preemptible INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;

-- The new columns take a version too (see 0019).
DROP TRIGGER task_version_update;
CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict,
    not_preemptible, preemptions, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;
