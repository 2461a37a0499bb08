-- jobq schema 13: jobs partitioned by status, the finished ones by completion time.
--
-- This migration rewrites the jobs table: `jobq migrate` applies it to a database whose
-- jobs table is empty, and refuses it otherwise until run as `jobq migrate --partition`
-- (README, "Upgrading to the partitioned layout"). Writes to jobs wait for it.
--
-- The layout (Oban Pro's):
--   jobs                  partitioned by LIST (status)
--   ├─ jobs_live          pending, claimed, running: every state a claim moves through,
--   │                     so SKIP LOCKED, the claim index and claimed -> running ->
--   │                     pending-again never move a row between tables
--   └─ jobs_finished      done, failed (old clients), dead, cancelled; partitioned by
--      │                  RANGE (completed_at)
--      ├─ jobs_finished_<start>   one per JOBQ_PARTITION_INTERVAL, created ahead of time
--      │                  by the maintenance leader (jobq.partitions) and dropped whole
--      │                  by retention
--      └─ jobs_finished_default   what no range covers: every finished job converted by
--                         this migration, and any job finishing while no partition
--                         covers the hour (a leader down for days); pruned by DELETE
--
-- What PostgreSQL (15, 16) does not allow on a partitioned table, and what stands in:
--   * identity columns (until 17): ids come from the sequence jobs_id_seq, owned by
--     jobs.id, so pg_get_serial_sequence('jobs', 'id') still names it;
--   * a primary key without the partition key: id is unique per leaf (jobs_live_pkey,
--     and a unique index on each finished partition), and overall by the sequence;
--   * global unique indexes: a job's idempotency key is held by jobs_key_held_idx on
--     jobs_live while the job is live and in its scope, and, for the scope 'always',
--     by a row of job_idempotency_keys from its insert until the job row goes (deleted,
--     or its partition dropped); the inserts of jobq.store.sql.enqueue look at both.

-- The old table steps aside; its rows are copied into the new one below.
ALTER TABLE jobs RENAME TO jobs_unpartitioned;
ALTER TABLE jobs_unpartitioned DROP CONSTRAINT jobs_pkey;
DROP INDEX jobs_completed_idx, jobs_created_idx, jobs_dead_created_idx, jobs_failed_idx,
    jobs_inflight_heartbeat_idx, jobs_key_held_idx, jobs_pending_claim_idx, jobs_schedule_active_idx,
    jobs_schedule_created_idx, jobs_tags_idx, jobs_type_created_idx;

CREATE SEQUENCE jobs_id AS bigint;
SELECT setval('jobs_id', greatest(v, 1), v >= 1)
FROM (SELECT greatest(
    coalesce(pg_sequence_last_value(pg_get_serial_sequence('jobs_unpartitioned', 'id')::regclass), 0),
    (SELECT coalesce(max(id), 0) FROM jobs_unpartitioned)) AS v) AS last;

-- The same columns, in the same order, with the same checks.
CREATE TABLE jobs (
    id              bigint      NOT NULL DEFAULT nextval('jobs_id'),
    type            text        NOT NULL CONSTRAINT jobs_type_check CHECK (type <> '' AND length(type) <= 200),
    payload         jsonb       NOT NULL DEFAULT '{}' CONSTRAINT jobs_payload_check CHECK (jsonb_typeof(payload) = 'object'),
    status          text        NOT NULL DEFAULT 'pending'
                    CONSTRAINT jobs_status_check
                    CHECK (status IN ('pending', 'claimed', 'running', 'done', 'failed', 'dead', 'cancelled')),
    priority        smallint    NOT NULL DEFAULT 5 CONSTRAINT jobs_priority_check CHECK (priority BETWEEN 1 AND 10),
    attempt         integer     NOT NULL DEFAULT 0 CONSTRAINT jobs_attempt_check CHECK (attempt >= 0),
    max_retries     integer     NOT NULL DEFAULT 3 CONSTRAINT jobs_max_retries_check CHECK (max_retries BETWEEN 0 AND 10),
    run_at          timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    heartbeat_at    timestamptz,
    completed_at    timestamptz,
    result          jsonb,
    error           text,
    worker_id       text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    queue           text        NOT NULL DEFAULT 'default' CONSTRAINT jobs_queue_check CHECK (queue <> '' AND length(queue) <= 100),
    started_at      timestamptz,
    errors          jsonb       NOT NULL DEFAULT '[]',
    lease           bigint,
    idempotency_key text        CONSTRAINT jobs_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    tags            text[]      CONSTRAINT jobs_tags_check CHECK (cardinality(tags) BETWEEN 1 AND 20),
    progress        jsonb,
    cancelled_by    text,
    retried_as      bigint,
    schedule        text,
    scheduled_for   timestamptz,
    snoozes         integer     NOT NULL DEFAULT 0 CONSTRAINT jobs_snoozes_check CHECK (snoozes >= 0),
    unique_while    text        NOT NULL DEFAULT 'always'
                    CONSTRAINT jobs_unique_while_check CHECK (unique_while IN ('pending', 'active', 'always'))
) PARTITION BY LIST (status);

-- All churn (three or four updates a job, then the move out): schema 1's free space per
-- page and early vacuum, now on the live rows only.
CREATE TABLE jobs_live PARTITION OF jobs FOR VALUES IN ('pending', 'claimed', 'running')
WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
CREATE TABLE jobs_finished PARTITION OF jobs FOR VALUES IN ('done', 'failed', 'dead', 'cancelled')
    PARTITION BY RANGE (completed_at);
CREATE TABLE jobs_finished_default PARTITION OF jobs_finished DEFAULT;

INSERT INTO jobs SELECT * FROM jobs_unpartitioned;
DROP TABLE jobs_unpartitioned;
ALTER SEQUENCE jobs_id RENAME TO jobs_id_seq;
ALTER SEQUENCE jobs_id_seq OWNED BY jobs.id;

-- The live rows' indexes (schema 1's, 5's, 6's and 8's, on this partition only).
ALTER TABLE jobs_live ADD CONSTRAINT jobs_live_pkey PRIMARY KEY (id);
CREATE INDEX jobs_pending_claim_idx ON jobs_live (queue, priority DESC, run_at, id) WHERE status = 'pending';
CREATE INDEX jobs_inflight_heartbeat_idx ON jobs_live (heartbeat_at) WHERE status IN ('claimed', 'running');
-- Listing newest first. No id among the keys: with statistics taken while the
-- partition was empty (reltuples = 0, autovacuum right after a drain), the planner
-- served the writes by id (the claim's, the outcomes') from an index whose columns
-- include id, reading all of it once a write (556 ms a claim, 94k buffers, in a soak),
-- instead of probing jobs_live_pkey. The listing sorts ties on created_at itself.
CREATE INDEX jobs_live_created_idx ON jobs_live (created_at);
CREATE INDEX jobs_live_type_created_idx ON jobs_live (type, created_at);
CREATE INDEX jobs_live_failed_idx ON jobs_live (heartbeat_at DESC) WHERE error IS NOT NULL;
CREATE INDEX jobs_live_tags_idx ON jobs_live USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX jobs_live_schedule_created_idx ON jobs_live (schedule, created_at DESC, id DESC) WHERE schedule IS NOT NULL;
CREATE INDEX jobs_schedule_active_idx ON jobs_live (schedule) WHERE schedule IS NOT NULL;
-- Spelt exactly as jobq.store.sql.enqueue.KEY_HELD.
CREATE UNIQUE INDEX jobs_key_held_idx ON jobs_live (idempotency_key)
    WHERE idempotency_key IS NOT NULL
      AND (unique_while = 'always' OR status = 'pending' OR (unique_while = 'active' AND status IN ('claimed', 'running')));

-- The finished rows' indexes: defined on jobs_finished, so every partition attached
-- later gets them (jobq.partitions also gives each a unique index on id).
CREATE UNIQUE INDEX jobs_finished_default_id_key ON jobs_finished_default (id);
CREATE INDEX jobs_created_idx ON jobs_finished (created_at, id);
CREATE INDEX jobs_type_created_idx ON jobs_finished (type, created_at, id);
CREATE INDEX jobs_dead_created_idx ON jobs_finished (created_at DESC, id DESC) WHERE status = 'dead';
CREATE INDEX jobs_completed_idx ON jobs_finished (completed_at);
CREATE INDEX jobs_failed_idx ON jobs_finished (heartbeat_at DESC) WHERE error IS NOT NULL;
CREATE INDEX jobs_tags_idx ON jobs_finished USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX jobs_schedule_created_idx ON jobs_finished (schedule, created_at DESC, id DESC) WHERE schedule IS NOT NULL;

-- Keys held for as long as their job exists (unique_while = 'always'). Small: only
-- keyed jobs of that scope have a row.
CREATE TABLE job_idempotency_keys (
    idempotency_key text   PRIMARY KEY,
    job_id          bigint NOT NULL
);
CREATE INDEX job_idempotency_keys_job_idx ON job_idempotency_keys (job_id);
INSERT INTO job_idempotency_keys (idempotency_key, job_id)
SELECT idempotency_key, id FROM jobs WHERE idempotency_key IS NOT NULL AND unique_while = 'always';

-- A job coming back to pending whose key another job holds now (migration 0008): the
-- holder is a live job in its scope, or a job of the scope 'always' in any state.
CREATE OR REPLACE FUNCTION jobs_supersede_returning() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    holder bigint;
BEGIN
    SELECT id INTO holder FROM jobs
    WHERE status IN ('pending', 'claimed', 'running') AND idempotency_key = NEW.idempotency_key AND id <> NEW.id
      AND (unique_while = 'always' OR status = 'pending' OR (unique_while = 'active' AND status IN ('claimed', 'running')))
    LIMIT 1;
    IF holder IS NULL THEN
        SELECT job_id INTO holder FROM job_idempotency_keys
        WHERE idempotency_key = NEW.idempotency_key AND job_id <> NEW.id;
    END IF;
    IF holder IS NOT NULL THEN
        NEW.status := 'cancelled';
        NEW.completed_at := now();
        NEW.cancelled_by := 'jobq';
        NEW.error := 'superseded by job ' || holder;
    END IF;
    RETURN NEW;
END $$;

-- A deleted job lets go of its 'always' key (a dropped partition does too, in
-- jobq.partitions, since DROP fires no trigger).
CREATE OR REPLACE FUNCTION jobs_counts_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM old_jobs) THEN
        RETURN NULL;
    END IF;
    INSERT INTO job_counters AS c (queue, type, name, slot, n)
    SELECT queue, type, status, jobq_counter_slot(), -count(*)
    FROM old_jobs
    GROUP BY queue, type, status
    ORDER BY queue, type, status
    ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n;
    DELETE FROM job_idempotency_keys AS k USING old_jobs AS o
    WHERE o.unique_while = 'always' AND o.idempotency_key IS NOT NULL AND k.job_id = o.id;
    RETURN NULL;
END
$$;

-- Schema 1's triggers, on the partitioned table: a statement's transition tables hold
-- the rows it changed in every partition, moves between partitions as updates.
CREATE TRIGGER jobs_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_counts_after_insert();
CREATE TRIGGER jobs_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_counts_after_update();
CREATE TRIGGER jobs_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_counts_after_delete();
CREATE TRIGGER jobs_supersede_returning BEFORE UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status <> 'pending' AND NEW.idempotency_key IS NOT NULL
          AND NEW.unique_while <> 'always')
    EXECUTE FUNCTION jobs_supersede_returning();
