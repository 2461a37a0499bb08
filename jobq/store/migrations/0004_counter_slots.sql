-- jobq schema 4: jobq's own sessions count in slots of their own.
--
-- Schema 1 chose a session's counter slot by pg_backend_pid() % 16, for every session.
-- An application that enqueues inside its own transaction and keeps it open holds the
-- rows of its slot (one per queue, type and name it touched) until it ends; every
-- worker whose backend fell in the same slot then waited on its next claim or outcome
-- of that queue and type, and two workers of one slot could deadlock across the
-- statements of one pipelined transaction (outcomes of one type, then a claim of
-- another). Now:
-- - applications (and the API, the CLI, raw SQL) keep slots 0..15, by pid, as before;
-- - each worker's claim session and each maintenance session, right after connecting,
--   takes the lowest free slot from 16 up (jobq_counter_slot_take), held by a session
--   advisory lock for the life of its connection, and records it in the setting
--   jobq.counter_slot, which the triggers and jobq.store.sql.counters.COUNTER_ADD read.
-- So a worker never writes a counter row that an application transaction can hold, and
-- no two connected jobq sessions share a row: none waits on another's counters, none can
-- deadlock with another on them. Slots are reused, so job_counters holds at most
-- 16 + (the most jobq sessions ever connected at once) rows per (queue, type, name);
-- readers still sum the slots. The slot only decides which row a change is added to,
-- never the sums: counts are exact whatever slot a session ends up in.

-- The slot this session counts in: the one jobq_counter_slot_take gave it, else its
-- backend pid modulo 16.
CREATE FUNCTION jobq_counter_slot() RETURNS smallint LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(current_setting('jobq.counter_slot', true), '')::smallint, (pg_backend_pid() % 16)::smallint)
$$;

-- Take the lowest slot from 16 up that no other session holds, for the rest of this
-- session, and return it (the one already taken, on a second call; NULL if all 32,752
-- are held). The lock is the two-integer advisory key (high word of the namespace's
-- keys, slot): a key space apart from the jobs' one-bigint keys, so it never blocks a
-- job and a job never blocks it. Tries are atomic: sessions connecting at once get
-- distinct slots.
CREATE FUNCTION jobq_counter_slot_take(lock_base bigint) RETURNS smallint LANGUAGE plpgsql AS $$
DECLARE
    taken smallint := nullif(current_setting('jobq.counter_slot', true), '')::smallint;
BEGIN
    IF taken IS NOT NULL THEN
        RETURN taken;
    END IF;
    FOR candidate IN 16..32767 LOOP
        IF pg_try_advisory_lock((lock_base >> 32)::integer, candidate) THEN
            PERFORM set_config('jobq.counter_slot', candidate::text, false);
            RETURN candidate;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The triggers of schema 1, unchanged but for the slot: computed once per statement.
CREATE OR REPLACE FUNCTION jobs_counts_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_slot smallint := jobq_counter_slot();
BEGIN
    INSERT INTO job_counters AS c (queue, type, name, slot, n)
    SELECT queue, type, name, my_slot, sum(n)
    FROM (
        SELECT queue, type, status AS name, count(*) AS n FROM new_jobs GROUP BY queue, type, status
        UNION ALL
        SELECT queue, type, 'enqueued_total', count(*) FROM new_jobs GROUP BY queue, type
    ) AS delta
    GROUP BY queue, type, name
    ORDER BY queue, type, name
    ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n;
    PERFORM jobq_wake(array_agg(queue), array_agg(n))
    FROM (SELECT queue, count(*) AS n FROM new_jobs WHERE status = 'pending' GROUP BY queue) AS q;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION jobs_counts_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_slot smallint;
BEGIN
    -- A statement that changed no row (an idle worker's empty claim) has nothing to count.
    IF NOT EXISTS (SELECT FROM new_jobs) THEN
        RETURN NULL;
    END IF;
    my_slot := jobq_counter_slot();
    INSERT INTO job_counters AS c (queue, type, name, slot, n)
    SELECT queue, type, name, my_slot, n
    FROM (
        SELECT queue, type, name, sum(n) AS n
        FROM (
            SELECT queue, type, status AS name, count(*) AS n FROM new_jobs GROUP BY queue, type, status
            UNION ALL
            SELECT queue, type, status, -count(*) FROM old_jobs GROUP BY queue, type, status
        ) AS depth
        GROUP BY queue, type, name
        UNION ALL
        -- Totals only grow: a statement that moved rows backwards (an operator's raw
        -- UPDATE) adds nothing rather than subtracting.
        SELECT queue, type, name, greatest(sum(n), 0)
        FROM (
            SELECT queue, type, 'done_total' AS name, count(*) FILTER (WHERE status = 'done') AS n
            FROM new_jobs GROUP BY queue, type
            UNION ALL
            SELECT queue, type, 'done_total', -count(*) FILTER (WHERE status = 'done') FROM old_jobs GROUP BY queue, type
            UNION ALL
            SELECT queue, type, 'dead_total', count(*) FILTER (WHERE status = 'dead') FROM new_jobs GROUP BY queue, type
            UNION ALL
            SELECT queue, type, 'dead_total', -count(*) FILTER (WHERE status = 'dead') FROM old_jobs GROUP BY queue, type
            -- A failed run either moves a job on to its next attempt or kills it.
            UNION ALL
            SELECT queue, type, 'failed_runs_total', sum(attempt) + count(*) FILTER (WHERE status = 'dead')
            FROM new_jobs GROUP BY queue, type
            UNION ALL
            SELECT queue, type, 'failed_runs_total', -(sum(attempt) + count(*) FILTER (WHERE status = 'dead'))
            FROM old_jobs GROUP BY queue, type
        ) AS totals
        GROUP BY queue, type, name
    ) AS delta
    WHERE n <> 0
    ORDER BY queue, type, name
    ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n;
    -- Rows that are pending after the update (a retry, a reclaim, a job returned at
    -- shutdown) may be due before the next poll: wake the workers of their queues.
    PERFORM jobq_wake(array_agg(queue), array_agg(n))
    FROM (SELECT queue, count(*) AS n FROM new_jobs WHERE status = 'pending' GROUP BY queue) AS q;
    RETURN NULL;
END
$$;

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
    RETURN NULL;
END
$$;
