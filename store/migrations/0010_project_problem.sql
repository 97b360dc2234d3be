-- Hardening II: a project stopped by an error of its own (its report cannot
-- be written, its result cannot be exported, its options do not parse)
-- keeps the reason here, for status and the report, until it is resumed.
ALTER TABLE projects ADD COLUMN problem TEXT NOT NULL DEFAULT '';
