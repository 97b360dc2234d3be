-- Issue 20: a task's network (open or none: front matter, else
-- project.yaml; '' leaves it to the node, else open).
ALTER TABLE tasks ADD COLUMN network TEXT NOT NULL DEFAULT '';
ALTER TABLE run_tasks ADD COLUMN network TEXT NOT NULL DEFAULT '';
