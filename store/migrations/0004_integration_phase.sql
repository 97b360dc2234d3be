-- The integration phase: the tree a task starts from, merge conflicts and
-- verification verdicts.
ALTER TABLE tasks ADD COLUMN base_dir TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN rate_limit_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN dangerous INTEGER NOT NULL DEFAULT 0;

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
