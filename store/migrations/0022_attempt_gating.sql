-- Issue 21: an attempt whose gate is running (its tool ended well, the
-- supervisor gates the result), for status to show.
ALTER TABLE attempts ADD COLUMN gating INTEGER NOT NULL DEFAULT 0;
