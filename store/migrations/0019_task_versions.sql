-- Issue 24: every change to a task row gives it a new version, unique in
-- the database (task_version counts them), so that the controller keeps the
-- rows it read and a tick reads again only those that changed: a steady
-- tick with 1,000 running tasks reads their versions, not their rows.
ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

CREATE TABLE task_version (n INTEGER NOT NULL);
INSERT INTO task_version (n) VALUES (0);

-- A row inserted, or changed in any column but version, takes the next
-- version. The trigger's own UPDATE sets version only, so it does not fire
-- again (and recursive triggers are off).
CREATE TRIGGER task_version_insert AFTER INSERT ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER task_version_update AFTER UPDATE ON tasks WHEN NEW.version = OLD.version BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

UPDATE tasks SET version = rowid;
UPDATE task_version SET n = (SELECT COALESCE(MAX(version), 0) FROM tasks);
