-- Issue 20: a task's limits (memory, cpu, pids, file_size: front matter,
-- else project.yaml; the node's fill in the rest at launch) as JSON, ''
-- for none.
ALTER TABLE tasks ADD COLUMN limits TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN limits TEXT NOT NULL DEFAULT '';
