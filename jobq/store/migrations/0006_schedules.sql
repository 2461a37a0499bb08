-- jobq schema 6: periodic jobs. The code declares what a schedule is (workers upsert
-- their declarations at boot); the operator decides whether it runs (paused_*); the
-- maintenance leader fires it (next_run_at).

CREATE TABLE jobq_schedules (
    name        text        PRIMARY KEY CONSTRAINT jobq_schedules_name_check CHECK (name ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    cron        text        NOT NULL,
    tz          text        NOT NULL DEFAULT 'UTC',
    type        text        NOT NULL,
    queue       text        NOT NULL,
    payload     jsonb       NOT NULL DEFAULT '{}',
    priority    smallint    NOT NULL,
    max_retries integer     NOT NULL,
    catch_up    text        NOT NULL CONSTRAINT jobq_schedules_catch_up_check CHECK (catch_up IN ('latest', 'all', 'skip')),
    overlap     text        NOT NULL CONSTRAINT jobq_schedules_overlap_check CHECK (overlap IN ('allow', 'skip')),
    hash        text        NOT NULL,              -- of the definition: cron .. overlap
    paused_at   timestamptz,                       -- set by an operator; survives every upsert
    paused_by   text,
    reason      text,
    next_run_at timestamptz NOT NULL,              -- the next slot to fire (in the past: due, or missed)
    last_run_at timestamptz,                       -- the slot of the latest job fired
    last_job_id bigint,                            -- no foreign key: retention deletes jobs
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now() -- the definition last changed
);

-- Each job knows its run: the schedule's name and the slot (UTC). NULL for every other
-- job, so no rewrite and nothing for the indexes below.
ALTER TABLE jobs
    ADD COLUMN schedule      text,
    ADD COLUMN scheduled_for timestamptz;

-- A schedule's jobs, newest first (GET /schedules/{name}).
CREATE INDEX jobs_schedule_created_idx ON jobs (schedule, created_at DESC, id DESC) WHERE schedule IS NOT NULL;
-- overlap='skip': does the schedule have a job pending, claimed or running? A few rows.
CREATE INDEX jobs_schedule_active_idx ON jobs (schedule)
    WHERE schedule IS NOT NULL AND status IN ('pending', 'claimed', 'running');

-- What each worker process declares: {"<name>": "<definition hash>"}. A schedule fires
-- while a worker with a fresh heartbeat declares it.
ALTER TABLE workers ADD COLUMN schedules jsonb NOT NULL DEFAULT '{}';
