CREATE TABLE projects (
    name        TEXT PRIMARY KEY,
    state       TEXT NOT NULL DEFAULT 'active',
    phase       TEXT NOT NULL DEFAULT 'implementation',
    result      TEXT NOT NULL DEFAULT '',
    options     TEXT NOT NULL DEFAULT '{}',
    started_at  TEXT NOT NULL DEFAULT '',
    finished_at TEXT NOT NULL DEFAULT ''
);

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
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (project, id)
);

CREATE TABLE runs (
    project      TEXT NOT NULL,
    task         TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    node         TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'claimed',
    pid          INTEGER NOT NULL DEFAULT 0,
    exit_code    INTEGER NOT NULL DEFAULT 0,
    signal       TEXT NOT NULL DEFAULT '',
    error_class  TEXT NOT NULL DEFAULT '',
    error        TEXT NOT NULL DEFAULT '',
    claimed_at   TEXT NOT NULL DEFAULT '',
    started_at   TEXT NOT NULL DEFAULT '',
    completed_at TEXT NOT NULL DEFAULT '',
    log_bytes    INTEGER NOT NULL DEFAULT 0,
    tokens_in    INTEGER NOT NULL DEFAULT 0,
    tokens_out   INTEGER NOT NULL DEFAULT 0,
    cost_usd     REAL NOT NULL DEFAULT 0,
    collected_at TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (project, task, attempt),
    FOREIGN KEY (project, task) REFERENCES tasks(project, id)
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
);
