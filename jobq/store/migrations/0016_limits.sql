-- jobq schema 16: flow control (concurrency and rate limits per queue and per
-- concurrency key), decided inside the claim's transaction.
--
-- Jobs carry an optional concurrency_key. Limits are rules: per queue (columns of
-- jobq_queues) and per key pattern (jobq_limits: 'tenant:*' gives each key under the
-- prefix a limit of its own; a pattern without '*' names one key). A worker claims
-- through jobq_claim_limited() only while some limit applies to its queues; otherwise
-- through the plain claim, which this migration does not touch.
--
-- Slots: a job claimed under a concurrency limit holds a row of jobq_limit_slots,
-- (job_id, lease of that claim), inserted by the claim and deleted by the holder's
-- fenced outcome in the same transaction as the outcome, or by the reaper only once
-- the job's advisory lock can be taken (its holder's session is gone). The number of
-- slots of a queue or a key is its use. Claims of one queue, and of one key, are
-- serialised by transaction-level advisory locks in the two-key space (namespace
-- 0x6a71, the hash of the scope), taken before the count is read, so that each count
-- is read by a statement that started after the previous claim committed.
--
-- Rates: every start under a rate limit is a row of jobq_limit_starts (scope, at);
-- a claim may start a job only while fewer than N starts of its scope lie in the
-- last period (a sliding log: exact "at most N starts in any window of one period").

ALTER TABLE jobs ADD COLUMN concurrency_key text;

ALTER TABLE jobq_queues
    ADD COLUMN concurrency  integer CONSTRAINT jobq_queues_concurrency_check CHECK (concurrency > 0),
    ADD COLUMN rate_count   integer CONSTRAINT jobq_queues_rate_count_check CHECK (rate_count > 0),
    ADD COLUMN rate_seconds integer CONSTRAINT jobq_queues_rate_seconds_check CHECK (rate_seconds IN (1, 60, 3600)),
    ADD COLUMN fair         boolean NOT NULL DEFAULT false,
    ADD COLUMN fair_cursor  text,
    ADD COLUMN limits_at    timestamptz,
    ADD COLUMN limits_by    text;

-- Fair queues take turns between keys: the keys of a queue's pending jobs in key order,
-- and each key's next job in claim order, read from this index (only jobs that carry
-- a key pay an entry).
CREATE INDEX jobs_pending_key_idx ON jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;

CREATE TABLE jobq_limits (
    pattern      text        PRIMARY KEY
                 CONSTRAINT jobq_limits_pattern_check CHECK (pattern <> '' AND length(pattern) <= 255
                     AND position('*' IN left(pattern, -1)) = 0),
    concurrency  integer     CONSTRAINT jobq_limits_concurrency_check CHECK (concurrency > 0),
    rate_count   integer     CONSTRAINT jobq_limits_rate_count_check CHECK (rate_count > 0),
    rate_seconds integer     CONSTRAINT jobq_limits_rate_seconds_check CHECK (rate_seconds IN (1, 60, 3600)),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    updated_by   text
);

CREATE TABLE jobq_limit_slots (
    job_id          bigint      NOT NULL,
    lease           bigint      NOT NULL,
    queue           text        NOT NULL,
    concurrency_key text,
    taken_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, lease)
);
CREATE INDEX jobq_limit_slots_queue_idx ON jobq_limit_slots (queue);
CREATE INDEX jobq_limit_slots_key_idx ON jobq_limit_slots (concurrency_key) WHERE concurrency_key IS NOT NULL;

CREATE TABLE jobq_limit_starts (
    scope text        NOT NULL,
    at    timestamptz NOT NULL
);
CREATE INDEX jobq_limit_starts_idx ON jobq_limit_starts (scope, at);

-- The rule of a key: the rule naming it exactly, else the longest prefix pattern
-- ('tenant:*') it falls under; no row when none (the key is unlimited).
CREATE FUNCTION jobq_limit_rule(key text) RETURNS SETOF jobq_limits LANGUAGE sql STABLE AS $$
    SELECT * FROM jobq_limits
    WHERE pattern = key OR (right(pattern, 1) = '*' AND starts_with(key, left(pattern, -1)))
    ORDER BY pattern = key DESC, length(pattern) DESC LIMIT 1
$$;

-- How many more jobs a scope ('queue <name>' or 'key <key>') may start now under a
-- rate of n per period (seconds): n less its starts in the last period. The caller
-- holds the scope's lock, and records each start it makes (clock_timestamp(), so that
-- the starts of claims serialised by that lock are in order).
CREATE FUNCTION jobq_limit_rate_left(scope text, n integer, period integer) RETURNS integer LANGUAGE sql VOLATILE AS $$
    SELECT n - count(*)::integer FROM jobq_limit_starts AS s
    WHERE s.scope = jobq_limit_rate_left.scope AND s.at > clock_timestamp() - make_interval(secs => period)
$$;

-- A fair queue's candidates for one claim: its next due job without a key (one turn,
-- looked for among the first scan due jobs), then the next due job of each of up to n
-- keys after the queue's cursor in key order, wrapping round to the first keys
-- (jobs_pending_key_idx: one probe per key walked, one per head).
CREATE FUNCTION jobq_fair_candidates(q text, after text, n integer, scan integer)
RETURNS TABLE (id bigint, concurrency_key text) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    k text := coalesce(after, '');
    nxt text;
    head bigint;
    walked integer := 0;
    wrapped boolean := false;
BEGIN
    RETURN QUERY SELECT s.id, NULL::text FROM (SELECT j.id, j.concurrency_key FROM jobs AS j
        WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
        ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan) AS s WHERE s.concurrency_key IS NULL LIMIT 1;
    WHILE walked < n LOOP
        nxt := (SELECT j.concurrency_key FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q
                AND j.concurrency_key IS NOT NULL AND j.concurrency_key > k ORDER BY j.concurrency_key LIMIT 1);
        IF nxt IS NULL THEN
            EXIT WHEN wrapped;
            wrapped := true;  -- round to the first keys, up to the cursor
            k := '';
            CONTINUE;
        END IF;
        EXIT WHEN wrapped AND nxt > coalesce(after, '');
        k := nxt;
        walked := walked + 1;
        head := (SELECT j.id FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q AND j.concurrency_key = k
                 AND j.run_at <= now() ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1);
        IF head IS NOT NULL THEN
            id := head;
            concurrency_key := k;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

-- The claim under limits: up to max_jobs due pending jobs of some queues (paused ones
-- left out), in claim order within each queue (queues in name order), each taken
-- only while its queue and its key have a free slot and rate. For each queue with a
-- limit, its lock is waited for (queues in name order: no deadlock); a key's lock is
-- only tried (a key another claim is deciding right now is skipped this time), so
-- two claims never wait on each other in opposite orders. Up to scan candidates per
-- queue are read without row locks; a chosen one is row-locked (SKIP LOCKED) before
-- it is taken. Returns each job claimed (new lease, claimed by worker), whether its
-- advisory lock was taken, and whether it holds a slot.
CREATE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint)
RETURNS TABLE (job jobs, locked boolean, slotted boolean) LANGUAGE plpgsql AS $$
DECLARE
    q text;
    qrow jobq_queues;
    queue_free integer;
    queue_rate boolean;
    cand record;
    rule jobq_limits;
    full_keys text[] := '{}';
    taken integer := 0;
    key_slot boolean;
    row_ jobs;
    stamp timestamptz;
    candidates refcursor;
    last_key text;
    before_pass integer;
BEGIN
    FOREACH q IN ARRAY ARRAY(SELECT DISTINCT x FROM unnest(queues) AS u(x) ORDER BY x) LOOP
        EXIT WHEN taken >= max_jobs;
        qrow := NULL;
        SELECT * INTO qrow FROM jobq_queues WHERE name = q;
        CONTINUE WHEN qrow.paused_at IS NOT NULL;
        queue_free := max_jobs - taken;
        queue_rate := qrow.rate_count IS NOT NULL;
        IF qrow.concurrency IS NOT NULL OR queue_rate OR qrow.fair THEN
            PERFORM pg_advisory_xact_lock(x'6a71'::integer, hashtext('queue ' || q));
            IF qrow.concurrency IS NOT NULL THEN
                queue_free := least(queue_free,
                    qrow.concurrency - (SELECT count(*) FROM jobq_limit_slots AS s WHERE s.queue = q)::integer);
            END IF;
            IF queue_rate THEN
                queue_free := least(queue_free, jobq_limit_rate_left('queue ' || q, qrow.rate_count, qrow.rate_seconds));
            END IF;
        END IF;
        CONTINUE WHEN queue_free <= 0;
        IF qrow.fair THEN
            queue_free := least(queue_free, 10);  -- no worker prefetches a long run of one key
        END IF;
        -- A fair queue's claim goes round its keys in passes (a job of each key a pass);
        -- any other queue's, once over its first scan due jobs.
        FOR pass IN 1..CASE WHEN qrow.fair THEN 10 ELSE 1 END LOOP
        before_pass := taken;
        last_key := NULL;
        IF qrow.fair THEN
            -- Turns between keys, from the cursor read after the queue's lock.
            OPEN candidates FOR SELECT f.id, f.concurrency_key FROM jobq_fair_candidates(q,
                (SELECT p.fair_cursor FROM jobq_queues AS p WHERE p.name = q), least(queue_free, 10), scan) AS f;
        ELSE
            OPEN candidates FOR SELECT j.id, j.concurrency_key FROM jobs AS j
                WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
                ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan;
        END IF;
        LOOP
            FETCH candidates INTO cand;
            EXIT WHEN NOT FOUND;
            last_key := coalesce(cand.concurrency_key, last_key);
            CONTINUE WHEN cand.concurrency_key = ANY(full_keys);
            rule := NULL;
            IF cand.concurrency_key IS NOT NULL THEN
                SELECT * INTO rule FROM jobq_limit_rule(cand.concurrency_key);
            END IF;
            IF rule.pattern IS NOT NULL THEN
                IF NOT pg_try_advisory_xact_lock(x'6a71'::integer, hashtext('key ' || cand.concurrency_key)) THEN
                    full_keys := full_keys || cand.concurrency_key;
                    CONTINUE;
                END IF;
                IF (rule.concurrency IS NOT NULL AND (SELECT count(*) FROM jobq_limit_slots AS s
                        WHERE s.concurrency_key = cand.concurrency_key) >= rule.concurrency)
                    OR (rule.rate_count IS NOT NULL
                        AND jobq_limit_rate_left('key ' || cand.concurrency_key, rule.rate_count, rule.rate_seconds) <= 0)
                THEN
                    full_keys := full_keys || cand.concurrency_key;
                    CONTINUE;
                END IF;
            END IF;
            -- The row itself, if no other claim has it (SKIP LOCKED) and it is still
            -- pending in its latest version.
            PERFORM FROM jobs AS j WHERE j.id = cand.id AND j.status = 'pending' FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            -- A start is the claim: its claimed_at is the instant its starts are recorded.
            stamp := clock_timestamp();
            IF rule.rate_count IS NOT NULL THEN
                INSERT INTO jobq_limit_starts (scope, at) VALUES ('key ' || cand.concurrency_key, stamp);
            END IF;
            IF queue_rate THEN
                INSERT INTO jobq_limit_starts (scope, at) VALUES ('queue ' || q, stamp);
            END IF;
            UPDATE jobs AS j SET status = 'claimed', claimed_at = stamp, heartbeat_at = now(), started_at = NULL,
                worker_id = worker, lease = nextval('jobs_lease_seq')
                WHERE j.id = cand.id AND j.status IN ('pending', 'claimed', 'running') RETURNING j.* INTO row_;
            key_slot := rule.concurrency IS NOT NULL;
            slotted := key_slot OR qrow.concurrency IS NOT NULL;
            IF slotted THEN
                INSERT INTO jobq_limit_slots (job_id, lease, queue, concurrency_key)
                VALUES (row_.id, row_.lease, q, row_.concurrency_key);
            END IF;
            job := row_;
            locked := pg_try_advisory_lock(lock_base | row_.id);
            RETURN NEXT;
            taken := taken + 1;
            queue_free := queue_free - 1;
            EXIT WHEN queue_free <= 0 OR taken >= max_jobs;
        END LOOP;
        CLOSE candidates;
        IF qrow.fair AND last_key IS NOT NULL THEN
            UPDATE jobq_queues SET fair_cursor = last_key WHERE name = q;
        END IF;
        EXIT WHEN taken = before_pass OR queue_free <= 0 OR taken >= max_jobs;
        END LOOP;
    END LOOP;
END
$$;

-- Frees the slots of some (job_id, lease) pairs, and wakes idle workers of the queues
-- that gained a free slot (one notification per queue). Returns how many were freed.
CREATE FUNCTION jobq_limit_release(ids bigint[], leases bigint[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    freed record;
    total integer := 0;
BEGIN
    FOR freed IN WITH gone AS (DELETE FROM jobq_limit_slots AS s USING unnest(ids, leases) AS r(id, lease)
                               WHERE s.job_id = r.id AND s.lease = r.lease RETURNING s.queue)
                 SELECT queue, count(*) AS n FROM gone GROUP BY queue LOOP
        PERFORM jobq_wake(ARRAY[freed.queue], ARRAY[freed.n]);
        total := total + freed.n;
    END LOOP;
    RETURN total;
END
$$;
