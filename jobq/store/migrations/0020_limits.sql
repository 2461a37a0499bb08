-- jobq schema 20: flow control (concurrency and rate limits per queue and per
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
-- Rates: the starts of one claim under a rate limit are a row of jobq_limit_starts
-- (scope, at, n: that many started at that instant); a claim may start a job only while
-- fewer than N starts of its scope lie in the last period (a sliding log: exact "at most
-- N starts in any window of one period"), summed over a row per claim, not per job.

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
    at    timestamptz NOT NULL,
    n     integer     NOT NULL CONSTRAINT jobq_limit_starts_n_check CHECK (n > 0)
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
    SELECT jobq_limit_rate_left.n - coalesce(sum(s.n), 0)::integer FROM jobq_limit_starts AS s
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
-- left out; queues in name order, jobs in claim order within each, or in turns between
-- keys for a fair queue), each taken only while its queue and its key have a free slot
-- and rate. Set-based: a handful of statements per queue, not per job.
--   1. A limited (or fair) queue's lock is waited for (queues in name order: no
--      deadlock), then its slots and starts counted by statements that start after it.
--   2. Up to scan candidates are read without row locks; the rules of their keys are
--      read; each key's lock is only tried (a key another claim is deciding right now
--      is skipped this time, so two claims never wait on each other in opposite
--      orders), then the keys' slots and starts counted, after those locks.
--   3. The candidates are chosen in order against what is left of each limit; the
--      chosen rows are locked SKIP LOCKED (one another claim took is simply not taken),
--      their starts recorded, and they are claimed (new lease) with their slots
--      inserted and their advisory locks taken, by one statement.
-- Returns each job claimed, whether its advisory lock was taken, and whether it holds
-- a slot.
CREATE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint)
RETURNS TABLE (job jobs, locked boolean, slotted boolean) LANGUAGE plpgsql AS $$
DECLARE
    q text;
    qrow jobq_queues;
    queue_free integer;
    taken integer := 0;
    cand_ids bigint[];
    cand_keys text[];
    rule_keys text[];
    rule_conc integer[];
    rule_rate integer[];
    rule_period integer[];
    key_left integer[];
    full_keys text[] := '{}';
    try_keys text[];
    locked integer;
    slot_keys text[];
    rate_keys text[];
    chosen bigint[];
    lockable bigint[];
    pos integer;
    k text;
    stamp timestamptz;
    before_pass integer;
    got integer;
    -- Without a rule on keys, no candidate is refused for its key: the first ones do.
    scan_n integer := CASE WHEN EXISTS (SELECT FROM jobq_limits) THEN scan ELSE least(scan, max_jobs) END;
BEGIN
    FOREACH q IN ARRAY ARRAY(SELECT DISTINCT x FROM unnest(queues) AS u(x) ORDER BY x) LOOP
        EXIT WHEN taken >= max_jobs;
        qrow := NULL;
        SELECT * INTO qrow FROM jobq_queues WHERE name = q;
        CONTINUE WHEN qrow.paused_at IS NOT NULL;
        queue_free := max_jobs - taken;
        IF qrow.concurrency IS NOT NULL OR qrow.rate_count IS NOT NULL OR qrow.fair THEN
            PERFORM pg_advisory_xact_lock(x'6a71'::integer, hashtext('queue ' || q));
            IF qrow.concurrency IS NOT NULL THEN
                queue_free := least(queue_free,
                    qrow.concurrency - (SELECT count(*) FROM jobq_limit_slots AS s WHERE s.queue = q)::integer);
            END IF;
            IF qrow.rate_count IS NOT NULL THEN
                queue_free := least(queue_free, jobq_limit_rate_left('queue ' || q, qrow.rate_count, qrow.rate_seconds));
            END IF;
            IF qrow.fair THEN
                queue_free := least(queue_free, 10);  -- no worker prefetches a long run of one key
            END IF;
        END IF;
        -- A fair queue's claim goes round its keys in passes (a job of each key a pass);
        -- any other queue's, once over its first scan due jobs.
        FOR pass IN 1..CASE WHEN qrow.fair THEN 10 ELSE 1 END LOOP
            EXIT WHEN queue_free <= 0;
            before_pass := taken;
            IF qrow.fair THEN
                SELECT array_agg(f.id ORDER BY f.n), array_agg(f.concurrency_key ORDER BY f.n)
                INTO cand_ids, cand_keys
                FROM jobq_fair_candidates(q, (SELECT p.fair_cursor FROM jobq_queues AS p WHERE p.name = q),
                                          queue_free, scan) WITH ORDINALITY AS f(id, concurrency_key, n);
            ELSE
                SELECT array_agg(c.id ORDER BY c.n), array_agg(c.concurrency_key ORDER BY c.n) INTO cand_ids, cand_keys
                FROM (SELECT j.id, j.concurrency_key, row_number() OVER () AS n FROM (SELECT j.id, j.concurrency_key
                      FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
                      ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan_n) AS j) AS c;
            END IF;
            EXIT WHEN cand_ids IS NULL;
            -- The rules of the candidates' keys, those keys' locks tried, then their use.
            -- (jobq_limit_rule's choice, as one join of the few rules with the keys)
            SELECT array_agg(r.k), array_agg(r.concurrency), array_agg(r.rate_count), array_agg(r.rate_seconds)
            INTO rule_keys, rule_conc, rule_rate, rule_period
            FROM (SELECT DISTINCT ON (d.k) d.k, l.concurrency, l.rate_count, l.rate_seconds
                  FROM (SELECT DISTINCT u.k FROM unnest(cand_keys) AS u(k)
                        WHERE u.k IS NOT NULL AND u.k <> ALL(full_keys)) AS d
                  JOIN jobq_limits AS l ON l.pattern = d.k OR (right(l.pattern, 1) = '*' AND starts_with(d.k, left(l.pattern, -1)))
                  ORDER BY d.k, l.pattern = d.k DESC, length(l.pattern) DESC) AS r;
            rule_keys := coalesce(rule_keys, '{}');
            -- Only as many keys' locks as this claim can use are tried, those whose slots
            -- look free (read before the locks: a guess, checked after them), in an order
            -- of this worker's own: concurrent claims over the same candidates then lock
            -- mostly different keys, where each locking all of them left the others none.
            -- A key not tried is left alone this time, as a key whose lock is taken.
            try_keys := ARRAY(SELECT u.k FROM unnest(rule_keys, rule_conc) AS u(k, conc)
                LEFT JOIN (SELECT s.concurrency_key AS k, count(*) AS n FROM jobq_limit_slots AS s
                           WHERE s.concurrency_key = ANY(rule_keys) GROUP BY s.concurrency_key) AS used ON used.k = u.k
                WHERE u.conc IS NULL OR coalesce(used.n, 0) < u.conc ORDER BY hashtext(u.k || worker));
            full_keys := full_keys || ARRAY(SELECT u.k FROM unnest(rule_keys) AS u(k) WHERE u.k <> ALL(try_keys));
            locked := 0;
            FOREACH k IN ARRAY try_keys LOOP
                IF locked >= queue_free OR NOT pg_try_advisory_xact_lock(x'6a71'::integer, hashtext('key ' || k)) THEN
                    full_keys := full_keys || k;
                ELSE
                    locked := locked + 1;
                END IF;
            END LOOP;
            SELECT array_agg(CASE WHEN u.k = ANY(full_keys) THEN 0 ELSE least(
                       u.conc - coalesce(used.n, 0)::integer,
                       CASE WHEN u.rate IS NOT NULL THEN jobq_limit_rate_left('key ' || u.k, u.rate, u.period) END)
                   END ORDER BY u.i)
            INTO key_left
            FROM unnest(rule_keys, rule_conc, rule_rate, rule_period) WITH ORDINALITY AS u(k, conc, rate, period, i)
            LEFT JOIN (SELECT s.concurrency_key AS k, count(*) AS n FROM jobq_limit_slots AS s
                       WHERE s.concurrency_key = ANY(rule_keys) GROUP BY s.concurrency_key) AS used ON used.k = u.k;
            -- Choose in order, against what each limit has left.
            chosen := '{}';
            FOR i IN 1..array_length(cand_ids, 1) LOOP
                EXIT WHEN queue_free <= 0;
                k := cand_keys[i];
                pos := CASE WHEN k IS NULL THEN NULL ELSE array_position(rule_keys, k) END;
                IF pos IS NOT NULL THEN
                    CONTINUE WHEN key_left[pos] IS NOT NULL AND key_left[pos] <= 0;
                    key_left[pos] := key_left[pos] - 1;
                ELSIF k IS NOT NULL AND k = ANY(full_keys) THEN
                    CONTINUE;
                END IF;
                chosen := chosen || cand_ids[i];
                queue_free := queue_free - 1;
            END LOOP;
            -- Each key whose use was read is decided for this claim: a later pass reads
            -- it again (after the slots this one took), not the keys refused.
            full_keys := full_keys || ARRAY(SELECT u.k FROM unnest(rule_keys, key_left) AS u(k, l) WHERE l <= 0);
            lockable := ARRAY(SELECT j.id FROM jobs AS j WHERE j.id = ANY(chosen) AND j.status = 'pending'
                              FOR UPDATE SKIP LOCKED);
            slot_keys := ARRAY(SELECT u.k FROM unnest(rule_keys, rule_conc) AS u(k, c) WHERE c IS NOT NULL);
            rate_keys := ARRAY(SELECT u.k FROM unnest(rule_keys, rule_rate) AS u(k, r) WHERE r IS NOT NULL);
            stamp := clock_timestamp();  -- a start is the claim: its claimed_at is when its starts are recorded
            INSERT INTO jobq_limit_starts (scope, at, n)
                SELECT 'key ' || j.concurrency_key, stamp, count(*) FROM jobs AS j
                WHERE j.id = ANY(lockable) AND j.concurrency_key = ANY(rate_keys) GROUP BY j.concurrency_key
                UNION ALL SELECT 'queue ' || q, stamp, cardinality(lockable)
                WHERE qrow.rate_count IS NOT NULL AND cardinality(lockable) > 0;
            RETURN QUERY
                WITH claimed AS (
                    UPDATE jobs AS j SET status = 'claimed', claimed_at = stamp, heartbeat_at = now(),
                        started_at = NULL, worker_id = worker, lease = nextval('jobs_lease_seq')
                    WHERE j.id = ANY(lockable) AND j.status IN ('pending', 'claimed', 'running') RETURNING j.*),
                slots AS (
                    INSERT INTO jobq_limit_slots (job_id, lease, queue, concurrency_key)
                    SELECT c.id, c.lease, c.queue, c.concurrency_key FROM claimed AS c
                    WHERE qrow.concurrency IS NOT NULL OR c.concurrency_key = ANY(slot_keys))
                SELECT c::jobs, pg_try_advisory_lock(lock_base | c.id),
                       qrow.concurrency IS NOT NULL OR coalesce(c.concurrency_key = ANY(slot_keys), false)
                FROM claimed AS c ORDER BY array_position(chosen, c.id);
            GET DIAGNOSTICS got = ROW_COUNT;
            taken := taken + got;
            queue_free := queue_free + (cardinality(chosen) - got);  -- rows another claim took: not ours
            IF qrow.fair THEN
                UPDATE jobq_queues SET fair_cursor = (SELECT max(u.k) FROM unnest(cand_keys) AS u(k)
                    WHERE u.k IS NOT NULL AND u.k <= coalesce(cand_keys[array_length(cand_keys, 1)], u.k))
                WHERE name = q AND cand_keys[array_length(cand_keys, 1)] IS NOT NULL;
            END IF;
            EXIT WHEN taken = before_pass OR taken >= max_jobs;
        END LOOP;
    END LOOP;
END
$$;

-- Frees the slots of some (job_id, lease) pairs; returns how many. (Idle workers with
-- due jobs held back look again within 0.4 s: no notification, whose commit-time lock
-- would serialise every outcome.)
CREATE FUNCTION jobq_limit_release(ids bigint[], leases bigint[]) RETURNS integer LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM jobq_limit_slots AS s USING unnest(ids, leases) AS r(id, lease)
                  WHERE s.job_id = r.id AND s.lease = r.lease RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;
