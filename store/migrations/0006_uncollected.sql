-- The collection looks, every tick, for the finished attempts whose files
-- are not collected yet: few among many.
CREATE INDEX runs_uncollected ON runs(project, task, attempt) WHERE collected_at = '';
