-- Issue 23: why a schedule is disabled (the circuit breaker, or the
-- operator), for `dispatch schedule` to show with the command that
-- enables it again.
ALTER TABLE schedules ADD COLUMN disabled_reason TEXT NOT NULL DEFAULT '';
