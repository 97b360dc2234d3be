-- Issue 33 items 4 and 5:
-- given is the result of each dependency an attempt received when it was
-- claimed, as JSON [{"task": "S01", "attempt": 2}] ('' for none), for
-- status and report to name and to tell a stale dependent; final_message
-- is what the agent CLI reported as its last word (claude's result, codex's
-- last agent message, gemini's last reply), at most 4 KiB, for the prompts
-- of its dependents.
ALTER TABLE attempts ADD COLUMN given TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN final_message TEXT NOT NULL DEFAULT '';
