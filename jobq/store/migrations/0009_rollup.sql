-- jobq schema 9: a per-minute rollup of what the queue did, kept a day or more, for
-- the dashboard's charts over 15 minutes, an hour and a day (jobq.rollup).
--
-- The maintenance leader writes one row per whole minute and queue a few seconds after
-- the minute ends, and one more under queue '' for all queues together. Counts and
-- percentiles come from the jobs that finished in the minute (jobs_completed_idx: one
-- index range of that minute's rows); failed runs from the difference of the
-- failed_runs_total counters between the minute's newest sample and the one before
-- (job_counter_samples); depth from the counters as read when the minute was rolled up. The primary key makes
-- a minute written once whatever the number of leaders (INSERT ... ON CONFLICT DO
-- NOTHING). JOBQ_ROLLUP_RETENTION bounds its size: a day is 1,440 rows per queue.
--
-- Number 8 is reserved for a change developed in parallel (jobq.migrate allows the gap
-- and applies 0008 when it arrives).
CREATE TABLE jobq_minutes (
    minute            timestamptz NOT NULL,  -- the minute's start (date_trunc('minute'))
    queue             text        NOT NULL,  -- '' : all queues together
    completed         bigint      NOT NULL,  -- jobs done in the minute (completed_at)
    failed            bigint      NOT NULL,  -- failed runs (retried or dead) in the minute
    dead              bigint      NOT NULL,  -- jobs that died in the minute
    cancelled         bigint      NOT NULL,  -- jobs cancelled in the minute
    pending           bigint,                -- depth when rolled up (NULL: rolled up late)
    running           bigint,
    run_p50           float8,                -- started -> completed of the jobs done, seconds
    run_p95           float8,
    run_p99           float8,
    latency_p50       float8,                -- run_at -> started of the jobs done, seconds
    latency_p95       float8,
    latency_p99       float8,
    PRIMARY KEY (queue, minute)  -- a series is one range of it; the table is small
);
