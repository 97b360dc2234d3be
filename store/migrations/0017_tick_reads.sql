-- Issue 24: a steady tick reads what changed, not every task of the
-- project. What it needs besides the live tasks is found on indexes:
-- the pending dependents of a task (task_deps by dep), the earliest
-- backoff among the pending tasks (tasks_due), and whether a row of the
-- project would not read back (task_damage, kept by triggers: a row whose
-- depends_on, tags or limits are not the JSON dispatch writes). A project
-- with a damaged row is left out of the tick and stopped after a few, as
-- when every task was read at each tick.
CREATE INDEX task_deps_dep ON task_deps(project, dep);
CREATE INDEX tasks_due ON tasks(project, status, not_before);

CREATE TABLE task_damage (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    PRIMARY KEY (project, task)
);

-- A list column reads back when it is a JSON array (or null) of strings
-- (or nulls); limits when empty or a JSON object (or null). json_type and
-- json_each fail on text that is not JSON, hence the CASEs.
CREATE VIEW task_damaged AS
    SELECT project, id FROM tasks WHERE
        (CASE WHEN json_valid(depends_on) THEN json_type(depends_on) NOT IN ('array', 'null')
            OR EXISTS (SELECT 1 FROM json_each(depends_on) WHERE type NOT IN ('text', 'null')) ELSE 1 END)
        OR (CASE WHEN json_valid(tags) THEN json_type(tags) NOT IN ('array', 'null')
            OR EXISTS (SELECT 1 FROM json_each(tags) WHERE type NOT IN ('text', 'null')) ELSE 1 END)
        OR (limits != '' AND (CASE WHEN json_valid(limits) THEN json_type(limits) NOT IN ('object', 'null') ELSE 1 END));

CREATE TRIGGER task_damage_insert AFTER INSERT ON tasks BEGIN
    INSERT OR IGNORE INTO task_damage(project, task)
        SELECT project, id FROM task_damaged WHERE project = NEW.project AND id = NEW.id;
END;

CREATE TRIGGER task_damage_update AFTER UPDATE OF depends_on, tags, limits, project, id ON tasks BEGIN
    DELETE FROM task_damage WHERE project = OLD.project AND task = OLD.id;
    INSERT OR IGNORE INTO task_damage(project, task)
        SELECT project, id FROM task_damaged WHERE project = NEW.project AND id = NEW.id;
END;

CREATE TRIGGER task_damage_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM task_damage WHERE project = OLD.project AND task = OLD.id;
END;

INSERT OR IGNORE INTO task_damage(project, task) SELECT project, id FROM task_damaged;

-- The tasks of a project by status, kept by triggers: halt, budget and
-- the phase machine read counts, never every row.
CREATE TABLE task_counts (
    project TEXT NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (project, status)
);

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts(project, status, n) VALUES (NEW.project, NEW.status, 1)
        ON CONFLICT(project, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_update AFTER UPDATE OF status, project ON tasks
    WHEN OLD.status != NEW.status OR OLD.project != NEW.project BEGIN
    UPDATE task_counts SET n = n - 1 WHERE project = OLD.project AND status = OLD.status;
    INSERT INTO task_counts(project, status, n) VALUES (NEW.project, NEW.status, 1)
        ON CONFLICT(project, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE project = OLD.project AND status = OLD.status;
END;

INSERT INTO task_counts(project, status, n) SELECT project, status, COUNT(*) FROM tasks GROUP BY project, status;

-- Candidates are read in priority and ID order and the read stops at its
-- limit: an index in that order spares sorting every pending task.
CREATE INDEX tasks_ready ON tasks(project, status, priority, id);
