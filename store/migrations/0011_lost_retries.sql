-- Issue 25: an attempt lost with its node (node_offline_timeout) is
-- requeued at once without using max_retries; this counts those requeues
-- so that a task that takes its node down every time still ends.
ALTER TABLE tasks ADD COLUMN lost_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_tasks ADD COLUMN lost_retries INTEGER NOT NULL DEFAULT 0;
