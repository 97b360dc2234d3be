-- Real agent CLIs: a task's stall timeout, the api_mode each attempt ran
-- under (fallback accounts) and the tool's session, which a retry after a
-- rate limit or a stall resumes.
ALTER TABLE tasks ADD COLUMN stall_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN api_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_status_node ON tasks(status, node);
