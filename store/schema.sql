-- The schema of a new database: what migrations/ up to the version below make of
-- an empty one, made in one step (store.createFresh). Written by
-- `go test ./store -run TestSchemaSnapshot -update`, never by hand.
-- version 31

CREATE TABLE projects (
    name        TEXT PRIMARY KEY,
    state       TEXT NOT NULL DEFAULT 'active',
    phase       TEXT NOT NULL DEFAULT 'implementation',
    result      TEXT NOT NULL DEFAULT '',
    options     TEXT NOT NULL DEFAULT '{}',
    started_at  TEXT NOT NULL DEFAULT '',
    finished_at TEXT NOT NULL DEFAULT ''
, final_commit TEXT NOT NULL DEFAULT '', run INTEGER NOT NULL DEFAULT 1, problem TEXT NOT NULL DEFAULT '');

CREATE TABLE tasks (
    project         TEXT NOT NULL REFERENCES projects(name),
    id              TEXT NOT NULL,
    title           TEXT NOT NULL DEFAULT '',
    type            TEXT NOT NULL DEFAULT 'implementation',
    tool            TEXT NOT NULL DEFAULT '',
    model           TEXT NOT NULL DEFAULT '',
    priority        INTEGER NOT NULL DEFAULT 5,
    depends_on      TEXT NOT NULL DEFAULT '[]',
    tags            TEXT NOT NULL DEFAULT '[]',
    node_pin        TEXT NOT NULL DEFAULT '',
    timeout_seconds REAL NOT NULL DEFAULT 0,
    max_retries     INTEGER NOT NULL DEFAULT 2,
    spec_file       TEXT NOT NULL DEFAULT '',
    spec_hash       TEXT NOT NULL,
    snapshot        BLOB NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',
    attempt         INTEGER NOT NULL DEFAULT 0,
    retries_used    INTEGER NOT NULL DEFAULT 0,
    node            TEXT NOT NULL DEFAULT '',
    not_before      TEXT NOT NULL DEFAULT '',
    exit_code       INTEGER NOT NULL DEFAULT 0,
    error_class     TEXT NOT NULL DEFAULT '',
    error           TEXT NOT NULL DEFAULT '',
    started_at      TEXT NOT NULL DEFAULT '',
    completed_at    TEXT NOT NULL DEFAULT '',
    heartbeat       TEXT NOT NULL DEFAULT '',
    heartbeat_at    TEXT NOT NULL DEFAULT '',
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL, warning TEXT NOT NULL DEFAULT '', base_dir TEXT NOT NULL DEFAULT '', rate_limit_retries INTEGER NOT NULL DEFAULT 0, stall_seconds REAL NOT NULL DEFAULT 0, base_commit TEXT NOT NULL DEFAULT '', reused_from INTEGER NOT NULL DEFAULT 0, lost_retries INTEGER NOT NULL DEFAULT 0, sandbox TEXT NOT NULL DEFAULT '', limits TEXT NOT NULL DEFAULT '', network TEXT NOT NULL DEFAULT '', version INTEGER NOT NULL DEFAULT 0, env TEXT NOT NULL DEFAULT '', retry_backoff_seconds REAL NOT NULL DEFAULT 0, files TEXT NOT NULL DEFAULT '', start_from TEXT NOT NULL DEFAULT '', on_conflict TEXT NOT NULL DEFAULT '', not_preemptible INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project, id)
);

CREATE TABLE nodes (
    name                TEXT PRIMARY KEY,
    state               TEXT NOT NULL DEFAULT 'unknown',
    last_seen           TEXT NOT NULL DEFAULT '',
    offline_since       TEXT NOT NULL DEFAULT '',
    last_error          TEXT NOT NULL DEFAULT '',
    os                  TEXT NOT NULL DEFAULT '',
    arch                TEXT NOT NULL DEFAULT '',
    wrapper_version     TEXT NOT NULL DEFAULT '',
    mem_available_bytes INTEGER NOT NULL DEFAULT 0,
    load1               REAL NOT NULL DEFAULT 0,
    disk_free_bytes     INTEGER NOT NULL DEFAULT 0,
    rtt_ms              REAL NOT NULL DEFAULT 0,
    updated_at          TEXT NOT NULL DEFAULT ''
);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    time        TEXT NOT NULL,
    project     TEXT NOT NULL DEFAULT '',
    task        TEXT NOT NULL DEFAULT '',
    attempt     INTEGER NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL,
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL DEFAULT '',
    node        TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL DEFAULT ''
, run INTEGER NOT NULL DEFAULT 1);

CREATE TABLE files (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    path    TEXT NOT NULL,
    size    INTEGER NOT NULL,
    sha256  TEXT NOT NULL,
    PRIMARY KEY (project, task, path)
);

CREATE TABLE conflicts (
    project TEXT NOT NULL,
    path    TEXT NOT NULL,
    tasks   TEXT NOT NULL, -- JSON list: the task whose version was kept first
    PRIMARY KEY (project, path)
);

CREATE TABLE verdicts (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    round   INTEGER NOT NULL,
    pass    INTEGER NOT NULL,
    issues  TEXT NOT NULL, -- JSON list
    PRIMARY KEY (project, task)
);

CREATE TABLE pauses (
    api_mode TEXT PRIMARY KEY,
    until    TEXT NOT NULL,
    reason   TEXT NOT NULL
);

CREATE TABLE "attempts" (
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
    inputs        TEXT NOT NULL DEFAULT '', sandbox TEXT NOT NULL DEFAULT '', gating INTEGER NOT NULL DEFAULT 0, given TEXT NOT NULL DEFAULT '', final_message TEXT NOT NULL DEFAULT '', base_commit TEXT NOT NULL DEFAULT '', slurm_job TEXT NOT NULL DEFAULT '', waiting TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (project, task, attempt)
);

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

CREATE TABLE run_tasks(
  run,
  project TEXT,
  id TEXT,
  title TEXT,
  type TEXT,
  tool TEXT,
  model TEXT,
  priority INT,
  depends_on TEXT,
  tags TEXT,
  node_pin TEXT,
  timeout_seconds REAL,
  max_retries INT,
  spec_file TEXT,
  spec_hash TEXT,
  snapshot,
  status TEXT,
  attempt INT,
  retries_used INT,
  node TEXT,
  not_before TEXT,
  exit_code INT,
  error_class TEXT,
  error TEXT,
  started_at TEXT,
  completed_at TEXT,
  heartbeat TEXT,
  heartbeat_at TEXT,
  created_at TEXT,
  updated_at TEXT,
  warning TEXT,
  base_dir TEXT,
  rate_limit_retries INT,
  stall_seconds REAL,
  base_commit TEXT,
  reused_from INT
, lost_retries INTEGER NOT NULL DEFAULT 0, sandbox TEXT NOT NULL DEFAULT '', limits TEXT NOT NULL DEFAULT '', network TEXT NOT NULL DEFAULT '', env TEXT NOT NULL DEFAULT '', retry_backoff_seconds REAL NOT NULL DEFAULT 0, files TEXT NOT NULL DEFAULT '', start_from TEXT NOT NULL DEFAULT '', on_conflict TEXT NOT NULL DEFAULT '', not_preemptible INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0);

CREATE TABLE run_files(
  run,
  project TEXT,
  task TEXT,
  attempt INT,
  path TEXT,
  size INT,
  sha256 TEXT
);

CREATE TABLE run_conflicts(
  run,
  project TEXT,
  path TEXT,
  tasks TEXT
);

CREATE TABLE run_verdicts(
  run,
  project TEXT,
  task TEXT,
  round INT,
  pass INT,
  issues TEXT
);

CREATE TABLE run_snapshots (
    project   TEXT NOT NULL,
    spec_hash TEXT NOT NULL,
    snapshot  BLOB NOT NULL,
    PRIMARY KEY (project, spec_hash)
);

CREATE TABLE task_attempts (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    last    INTEGER NOT NULL,
    PRIMARY KEY (project, task)
);

CREATE TABLE schedules (
    project     TEXT PRIMARY KEY,
    enabled     INTEGER NOT NULL DEFAULT 1,
    spec        TEXT NOT NULL DEFAULT '',
    next_at     TEXT NOT NULL DEFAULT '',
    last_at     TEXT NOT NULL DEFAULT '',
    last_run    INTEGER NOT NULL DEFAULT 0,
    last_result TEXT NOT NULL DEFAULT '',
    failures    INTEGER NOT NULL DEFAULT 0,
    skipped     INTEGER NOT NULL DEFAULT 0,
    catch_ups   INTEGER NOT NULL DEFAULT 0,
    updated_at  TEXT NOT NULL DEFAULT ''
, disabled_reason TEXT NOT NULL DEFAULT '');

CREATE TABLE task_deps (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    dep     TEXT NOT NULL
);

CREATE TABLE task_damage (
    project TEXT NOT NULL,
    task    TEXT NOT NULL,
    PRIMARY KEY (project, task)
);

CREATE TABLE task_counts (
    project TEXT NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (project, status)
);

CREATE TABLE task_version (n INTEGER NOT NULL);

CREATE TABLE project_stamps (project TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;

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

CREATE TABLE run_prunes (
    project TEXT NOT NULL,
    run     INTEGER NOT NULL,
    state   TEXT NOT NULL,
    at      TEXT NOT NULL,
    PRIMARY KEY (project, run)
) WITHOUT ROWID;

CREATE VIEW task_damaged AS
    SELECT project, id FROM tasks WHERE
        (CASE WHEN json_valid(depends_on) THEN json_type(depends_on) NOT IN ('array', 'null')
            OR EXISTS (SELECT 1 FROM json_each(depends_on) WHERE type NOT IN ('text', 'null')) ELSE 1 END)
        OR (CASE WHEN json_valid(tags) THEN json_type(tags) NOT IN ('array', 'null')
            OR EXISTS (SELECT 1 FROM json_each(tags) WHERE type NOT IN ('text', 'null')) ELSE 1 END)
        OR (limits != '' AND (CASE WHEN json_valid(limits) THEN json_type(limits) NOT IN ('object', 'null') ELSE 1 END));

CREATE INDEX events_project ON events(project, id);

CREATE INDEX tasks_status_node ON tasks(status, node);

CREATE INDEX events_run ON events(project, run, id);

CREATE UNIQUE INDEX run_tasks_key ON run_tasks(project, run, id);

CREATE UNIQUE INDEX run_files_key ON run_files(project, run, task, path);

CREATE UNIQUE INDEX run_conflicts_key ON run_conflicts(project, run, path);

CREATE UNIQUE INDEX run_verdicts_key ON run_verdicts(project, run, task);

CREATE INDEX events_task ON events(project, task, attempt, kind);

CREATE INDEX events_kind ON events(project, run, kind, id);

CREATE INDEX task_deps_task ON task_deps(project, task);

CREATE INDEX task_deps_dep ON task_deps(project, dep);

CREATE INDEX tasks_due ON tasks(project, status, not_before);

CREATE INDEX tasks_ready ON tasks(project, status, priority, id);

CREATE INDEX attempts_uncollected ON attempts(project, task, attempt) WHERE collected_at = '';

CREATE INDEX attempts_run ON attempts(project, run);

CREATE INDEX attempts_live ON attempts(api_mode) WHERE status IN ('claimed', 'running');

CREATE INDEX gate_runs_tree ON gate_runs(project, command, tree);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;

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

CREATE TRIGGER task_version_insert AFTER INSERT ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

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

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM run_prunes r WHERE r.project = OLD.project AND r.run = OLD.run)
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;

CREATE TRIGGER task_version_update AFTER UPDATE OF
    project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
    timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
    not_before, exit_code, error_class, error, started_at, completed_at, created_at, warning, base_dir,
    rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict,
    not_preemptible, preemptions, updated_at
    ON tasks BEGIN
    UPDATE task_version SET n = n + 1;
    UPDATE tasks SET version = (SELECT n FROM task_version) WHERE rowid = NEW.rowid;
END;

INSERT INTO task_version (n) VALUES (0);
