-- jobq schema 2: worker processes announce themselves, so that operators (and
-- /metrics) see who is alive and what each one runs.
CREATE TABLE workers (
    id             text        PRIMARY KEY,           -- hostname:pid:token, also jobs.worker_id
    hostname       text        NOT NULL,
    pid            integer     NOT NULL,
    queues         text[]      NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now(),
    current_job_id bigint,                            -- the job it is running, if any
    jobs_done      bigint      NOT NULL DEFAULT 0     -- outcomes it recorded (done or failed)
) WITH (fillfactor = 50);
