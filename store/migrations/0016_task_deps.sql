-- Issue 24: a task's dependencies as rows (task_deps), kept by triggers
-- from tasks.depends_on, so that readiness is a join on an index, not a
-- parse of every candidate's JSON at every tick. A depends_on that is not
-- valid JSON (a damaged row) gets a row naming no task: never completed,
-- so the task is never taken as free of dependencies.
CREATE TABLE task_deps (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    dep     TEXT NOT NULL
);
CREATE INDEX task_deps_task ON task_deps(project, task);

CREATE TRIGGER task_deps_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_deps(project, task, dep)
        SELECT NEW.project, NEW.id, value FROM json_each(CASE WHEN json_valid(NEW.depends_on) THEN NEW.depends_on ELSE '[""]' END);
END;

CREATE TRIGGER task_deps_update AFTER UPDATE OF depends_on, project, id ON tasks BEGIN
    DELETE FROM task_deps WHERE project = OLD.project AND task = OLD.id;
    INSERT INTO task_deps(project, task, dep)
        SELECT NEW.project, NEW.id, value FROM json_each(CASE WHEN json_valid(NEW.depends_on) THEN NEW.depends_on ELSE '[""]' END);
END;

CREATE TRIGGER task_deps_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM task_deps WHERE project = OLD.project AND task = OLD.id;
END;

INSERT INTO task_deps(project, task, dep)
    SELECT t.project, t.id, d.value FROM tasks AS t,
        json_each(CASE WHEN json_valid(t.depends_on) THEN t.depends_on ELSE '[""]' END) AS d;
