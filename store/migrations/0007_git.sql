-- Git-native projects (issue 12): the commit a task starts from, the
-- commit an attempt produced, and the commit a project ended with.
ALTER TABLE tasks ADD COLUMN base_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN result_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN final_commit TEXT NOT NULL DEFAULT '';
