-- Issue 21: every gate run on a result — a task's (an author attempt's,
-- under project.yaml's gate.task) or the project's (after S99 or a fix
-- round, under gate.project) — for the report, the retry's prompt, and so
-- that one command never gates the same tree twice.
CREATE TABLE gate_runs (
    id          INTEGER PRIMARY KEY,
    project     TEXT NOT NULL,
    run         INTEGER NOT NULL DEFAULT 0,
    task        TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    command     TEXT NOT NULL,
    tool        TEXT NOT NULL DEFAULT '',
    model       TEXT NOT NULL DEFAULT '',
    tree        TEXT NOT NULL,
    passed      INTEGER NOT NULL,
    exit_code   INTEGER NOT NULL,
    seconds     REAL NOT NULL,
    output_tail TEXT NOT NULL,
    error       TEXT NOT NULL,
    missing     INTEGER NOT NULL,
    reused      INTEGER NOT NULL,
    at          TEXT NOT NULL,
    UNIQUE (project, task, attempt)
);
CREATE INDEX gate_runs_tree ON gate_runs(project, command, tree);
