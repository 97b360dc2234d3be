-- Issue 24: the table of attempt rows is called attempts; "run" is left
-- to a project's numbered runs (projects.run, project_runs, run_*).
-- SQLite rewrites the triggers and views that name the table (with
-- legacy_alter_table off, the default); the indexes keep their names and
-- are made again under the new one.
ALTER TABLE runs RENAME TO attempts;
DROP INDEX runs_uncollected;
CREATE INDEX attempts_uncollected ON attempts(project, task, attempt) WHERE collected_at = '';
DROP INDEX runs_run;
CREATE INDEX attempts_run ON attempts(project, run);
