-- Issue 20: a task's sandbox (on, off, auto, or '' for the node's say:
-- front matter, else project.yaml) and how each attempt was confined
-- ('bwrap', or '' for not at all), as its status.json said.
ALTER TABLE tasks ADD COLUMN sandbox TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN sandbox TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN sandbox TEXT NOT NULL DEFAULT '';
