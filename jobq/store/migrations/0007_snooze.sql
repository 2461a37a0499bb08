-- jobq schema 7: a handler may snooze its job (jobq.Snooze): back to pending, later,
-- without an attempt counted; the job counts its snoozes. A constant default: no rewrite.
ALTER TABLE jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0 CONSTRAINT jobs_snoozes_check CHECK (snoozes >= 0);
