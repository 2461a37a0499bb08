-- jobq schema 3: what operators look at, kept cheap on a large table.

-- Recent failures (jobq inspect): rows whose last run failed, latest first. Partial:
-- only failing rows are in it (a success clears error), so it stays small.
CREATE INDEX jobs_failed_idx ON jobs (heartbeat_at DESC) WHERE error IS NOT NULL;

-- Dead letters still waiting for an operator (dead_letter_count, jobq inspect).
CREATE INDEX dead_letter_jobs_waiting_idx ON dead_letter_jobs (died_at DESC) WHERE replayed_at IS NULL;

-- Samples of the monotonic totals, taken every few seconds by the maintenance leader
-- and kept a quarter of an hour: rates over a trailing window (jobs per second, error
-- rate) are the difference between the live counters and the sample a window ago,
-- whatever the size of the jobs table.
CREATE TABLE job_counter_samples (
    at    timestamptz NOT NULL,
    queue text        NOT NULL,
    type  text        NOT NULL,
    name  text        NOT NULL,
    n     bigint      NOT NULL,
    PRIMARY KEY (at, queue, type, name)
);
