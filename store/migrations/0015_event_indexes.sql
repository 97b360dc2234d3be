-- Issue 24: the event lookups of every collection (collect_failed events
-- of one attempt) and of every status (the last notify event of a run)
-- read an index, not every event of the run: without these, they grew
-- with the events recorded, and a run of 4,000 no-op tasks spent a fifth
-- of the controller's CPU counting events.
CREATE INDEX events_task ON events(project, task, attempt, kind);
CREATE INDEX events_kind ON events(project, run, kind, id);
