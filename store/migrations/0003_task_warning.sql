-- A warning about a running task that is not (yet) a failure, such as a
-- stale heartbeat while the wrapper still lives; shown by `dispatch status`.
ALTER TABLE tasks ADD COLUMN warning TEXT NOT NULL DEFAULT '';
