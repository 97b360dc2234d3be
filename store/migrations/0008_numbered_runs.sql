-- Numbered runs (issue 14): a finished project that is started again
-- begins run N+1. The live tables hold the current run; a run that ends
-- is archived whole into the run_* tables when the next one begins.
-- Attempts (runs) and events carry the run they belong to and are kept
-- for every run: an attempt number is never used twice by one task.

ALTER TABLE projects ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN reused_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
CREATE INDEX events_run ON events(project, run, id);

-- Attempts outlive the task rows of their run (a phase task of run 1 is
-- gone in run 2, its attempts are history): the table is rebuilt without
-- the foreign key, with the run and the inputs the attempt ran from.
CREATE TABLE runs_new (
    project       TEXT NOT NULL,
    task          TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    node          TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'claimed',
    pid           INTEGER NOT NULL DEFAULT 0,
    exit_code     INTEGER NOT NULL DEFAULT 0,
    signal        TEXT NOT NULL DEFAULT '',
    error_class   TEXT NOT NULL DEFAULT '',
    error         TEXT NOT NULL DEFAULT '',
    claimed_at    TEXT NOT NULL DEFAULT '',
    started_at    TEXT NOT NULL DEFAULT '',
    completed_at  TEXT NOT NULL DEFAULT '',
    log_bytes     INTEGER NOT NULL DEFAULT 0,
    tokens_in     INTEGER NOT NULL DEFAULT 0,
    tokens_out    INTEGER NOT NULL DEFAULT 0,
    cost_usd      REAL NOT NULL DEFAULT 0,
    collected_at  TEXT NOT NULL DEFAULT '',
    dangerous     INTEGER NOT NULL DEFAULT 0,
    api_mode      TEXT NOT NULL DEFAULT '',
    session_id    TEXT NOT NULL DEFAULT '',
    result_commit TEXT NOT NULL DEFAULT '',
    run           INTEGER NOT NULL DEFAULT 1,
    inputs        TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (project, task, attempt)
);
INSERT INTO runs_new (project, task, attempt, node, status, pid, exit_code, signal, error_class, error, claimed_at,
    started_at, completed_at, log_bytes, tokens_in, tokens_out, cost_usd, collected_at, dangerous, api_mode, session_id, result_commit)
SELECT project, task, attempt, node, status, pid, exit_code, signal, error_class, error, claimed_at,
    started_at, completed_at, log_bytes, tokens_in, tokens_out, cost_usd, collected_at, dangerous, api_mode, session_id, result_commit
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_uncollected ON runs(project, task, attempt) WHERE collected_at = '';
CREATE INDEX runs_run ON runs(project, run);

-- One row per run that has ended and been followed by another: the
-- project's row as it was, and what the run did.
CREATE TABLE project_runs (
    project      TEXT NOT NULL,
    run          INTEGER NOT NULL,
    state        TEXT NOT NULL,
    phase        TEXT NOT NULL,
    result       TEXT NOT NULL,
    options      TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    finished_at  TEXT NOT NULL,
    final_commit TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (project, run)
);

-- The archive of an ended run's tasks, manifests, conflicts and verdicts:
-- the live tables' columns and the run. An archived task's spec text is
-- kept once per project and hash in run_snapshots, not once per run (a
-- scheduled project of 10,000 specs would copy them every run).
CREATE TABLE run_tasks AS SELECT 0 AS run, * FROM tasks WHERE 0;
CREATE UNIQUE INDEX run_tasks_key ON run_tasks(project, run, id);
CREATE TABLE run_files AS SELECT 0 AS run, * FROM files WHERE 0;
CREATE UNIQUE INDEX run_files_key ON run_files(project, run, task, path);
CREATE TABLE run_conflicts AS SELECT 0 AS run, * FROM conflicts WHERE 0;
CREATE UNIQUE INDEX run_conflicts_key ON run_conflicts(project, run, path);
CREATE TABLE run_verdicts AS SELECT 0 AS run, * FROM verdicts WHERE 0;
CREATE UNIQUE INDEX run_verdicts_key ON run_verdicts(project, run, task);
CREATE TABLE run_snapshots (
    project   TEXT NOT NULL,
    spec_hash TEXT NOT NULL,
    snapshot  BLOB NOT NULL,
    PRIMARY KEY (project, spec_hash)
);

-- The last attempt number each task ID has used, kept when a phase task
-- is removed with its attempts (the phase starts over): a task made again
-- numbers on from it, never reusing a number a node may still hold.
CREATE TABLE task_attempts (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    last    INTEGER NOT NULL,
    PRIMARY KEY (project, task)
);
