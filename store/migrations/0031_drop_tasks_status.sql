-- tasks_status (project, status) is the first two columns of tasks_due
-- and tasks_ready, which serve every read it served; it only cost an
-- index entry moved at each change of a task's status (three a task that
-- runs once) and at each task added (issue 35).
DROP INDEX tasks_status;
