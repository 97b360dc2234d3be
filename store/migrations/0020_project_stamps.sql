-- Issue 24: a project's stamp moves with every change a tick's read of the
-- project could see: a task row taking a new version (0019), a task row
-- deleted, an attempt row written, a dependency added or removed. A tick
-- that finds a project's stamp where its last read left it, and its nodes
-- naming the same live tasks, decides over what it read then (see
-- controller taskCache): a steady tick reads no task at all.
CREATE TABLE project_stamps (project TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;

-- task_version_insert and task_version_update set a new version with an
-- UPDATE of version alone, which fires this one.
CREATE TRIGGER project_stamp_task AFTER UPDATE OF version ON tasks BEGIN
    INSERT OR REPLACE INTO project_stamps (project, n) VALUES (NEW.project, NEW.version);
END;

CREATE TRIGGER project_stamp_task_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT OLD.project, n FROM task_version;
END;

CREATE TRIGGER project_stamp_attempt_insert AFTER INSERT ON attempts BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT NEW.project, n FROM task_version;
END;

CREATE TRIGGER project_stamp_attempt_update AFTER UPDATE ON attempts BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT NEW.project, n FROM task_version;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT OLD.project, n FROM task_version WHERE OLD.project != NEW.project;
END;

CREATE TRIGGER project_stamp_attempt_delete AFTER DELETE ON attempts BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT OLD.project, n FROM task_version;
END;

CREATE TRIGGER project_stamp_dep_insert AFTER INSERT ON task_deps BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT NEW.project, n FROM task_version;
END;

CREATE TRIGGER project_stamp_dep_delete AFTER DELETE ON task_deps BEGIN
    UPDATE task_version SET n = n + 1;
    INSERT OR REPLACE INTO project_stamps (project, n) SELECT OLD.project, n FROM task_version;
END;

INSERT INTO project_stamps (project, n) SELECT project, MAX(version) FROM tasks GROUP BY project;
