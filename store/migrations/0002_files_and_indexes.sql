-- Manifest of collected outputs, and what keeps the event log append-only.
CREATE TABLE files (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    path    TEXT NOT NULL,
    size    INTEGER NOT NULL,
    sha256  TEXT NOT NULL,
    PRIMARY KEY (project, task, path)
);

CREATE INDEX events_project ON events(project, id);
CREATE INDEX tasks_status ON tasks(project, status);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
