-- Issue 36 items 2 and 4: slurm_job is the id of the Slurm batch job that
-- runs the attempt ('' for an attempt of another executor); waiting is why
-- the attempt's job has not started yet (Slurm's pending reason), '' once
-- it started or when nothing waits. Both are the attempt's, not the task's:
-- no task column, so the task-version trigger of 0029 stands.
ALTER TABLE attempts ADD COLUMN slurm_job TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN waiting TEXT NOT NULL DEFAULT '';
