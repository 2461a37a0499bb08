-- jobq schema 27: the counters' insert and update triggers each run one statement.
--
-- Schemas 10 and 11 read each transition table once, but a trigger still ran its work
-- as several PL/pgSQL statements (the update's test for an empty statement, the counts,
-- the upsert of job_counters, and a call of jobq_wake, a PL/pgSQL function with a
-- statement of its own), each with its executor started. For a statement of one row,
-- the wake-up's path (the enqueue of one job, then its claim), that was most of what
-- the trigger cost: a single-row insert took 0.46 ms with the trigger and 0.34 without
-- it, the claim of one job 0.69 ms and 0.51 (round trips with their commits, PostgreSQL
-- 15; benchmark/README.md, "The wake-up's triggers"). Now each trigger is one
-- statement: the counts (MATERIALIZED: each transition table read once, as before), the
-- upsert as a data-modifying CTE, and jobq_wake's notifications spelt inline as its
-- SELECT (one per queue with rows pending after the statement, on jobq_wake_channel(),
-- unless jobq.notify is 'off'). A statement that changed no row (an idle worker's empty
-- claim) runs the same statement over empty tables: nothing counted, nothing sent. The
-- same counts, upserted in the same order (no deadlock between two writers of the
-- counters), and the same notifications as before. jobq_wake stays: the queue-resume
-- statement calls it.

CREATE OR REPLACE FUNCTION jobs_counts_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken bigint;
BEGIN
    WITH net AS MATERIALIZED (
        SELECT queue, type, status, count(*) AS n FROM new_jobs GROUP BY queue, type, status
    ),
    counted AS (
        INSERT INTO job_counters AS c (queue, type, name, slot, n)
        SELECT queue, type, name, jobq_counter_slot(), sum(n)
        FROM (SELECT queue, type, status AS name, n FROM net
              UNION ALL
              SELECT queue, type, 'enqueued_total', n FROM net) AS delta
        GROUP BY queue, type, name
        ORDER BY queue, type, name
        ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n
    )
    SELECT count(pg_notify(jobq_wake_channel(), queue || ' ' || n)) INTO woken
    FROM (SELECT queue, sum(n)::bigint AS n FROM net WHERE status = 'pending' GROUP BY queue) AS q
    WHERE current_setting('jobq.notify', true) IS DISTINCT FROM 'off';
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION jobs_counts_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken bigint;
BEGIN
    WITH net AS MATERIALIZED (
        -- Per (queue, type, status): rows gained (n) and attempts gained, over the statement.
        SELECT queue, type, status, sum(sign) AS n, sum(sign * attempt) AS attempts
        FROM (SELECT queue, type, status, attempt, 1 AS sign FROM new_jobs
              UNION ALL
              SELECT queue, type, status, attempt, -1 FROM old_jobs) AS rows
        GROUP BY queue, type, status
    ),
    totals AS (
        -- Totals only grow: a statement that moved rows backwards (an operator's raw
        -- UPDATE) adds nothing rather than subtracting. A failed run either moves a job
        -- on to its next attempt or kills it.
        SELECT queue, type,
               greatest(coalesce(sum(n) FILTER (WHERE status = 'done'), 0), 0) AS done,
               greatest(coalesce(sum(n) FILTER (WHERE status = 'dead'), 0), 0) AS dead,
               greatest(sum(attempts) + coalesce(sum(n) FILTER (WHERE status = 'dead'), 0), 0) AS failed_runs
        FROM net GROUP BY queue, type
    ),
    counted AS (
        INSERT INTO job_counters AS c (queue, type, name, slot, n)
        SELECT queue, type, name, jobq_counter_slot(), n
        FROM (
            SELECT queue, type, status AS name, n FROM net
            UNION ALL
            SELECT queue, type, total.name, total.n
            FROM totals, LATERAL (VALUES ('done_total', done), ('dead_total', dead), ('failed_runs_total', failed_runs))
                 AS total(name, n)
        ) AS delta
        WHERE n <> 0
        ORDER BY queue, type, name
        ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n
    )
    -- Rows that are pending after the update (a retry, a reclaim, a job returned at
    -- shutdown) may be due before the next poll: wake the workers of their queues.
    SELECT count(pg_notify(jobq_wake_channel(), queue || ' ' || n)) INTO woken
    FROM (SELECT queue, count(*) AS n FROM new_jobs WHERE status = 'pending' GROUP BY queue) AS q
    WHERE current_setting('jobq.notify', true) IS DISTINCT FROM 'off';
    RETURN NULL;
END
$$;
