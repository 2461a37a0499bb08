-- jobq schema 30: a key passed on to its next job by the worker that held it.
--
-- With rules on keys, a worker's claim is jobq_claim_limited (schemas 23 and 25): up to
-- 200 candidates read, their keys' rules joined, each key's lock tried and its slots
-- counted twice, the choice made, then the claim. With 100 keys at concurrency 1 every
-- worker holds at most its share of the 100 keys, so its claims are small (about 50) and
-- each cost PostgreSQL several times a plain claim of as many jobs (one session, claims
-- of 50 with the last batch's outcomes: 2.6 ms a claim of 37 jobs on average, against
-- 0.7 ms for a plain claim of 50; benchmark/README.md, "Flow control").
--
-- Yet most of what such a claim decides is known already. A worker writing the outcome
-- of a job that held a key's slot frees that slot in the same transaction, and the job
-- a claim would most often give the slot to is that key's next due job. This function,
-- given the claims whose slots the caller's transaction frees (job id, lease of the
-- claim), deletes those slots and passes each one of a key on: the key's next due
-- pending job in the same queue (jobs_pending_key_idx, schema 20) is claimed in the
-- same statement and takes a slot of the same key. No lock of the key and no decision
-- is needed for that: the slot is never free in between (deleted and taken in one
-- transaction, so any other claim, counting the key's slots after the key's lock, sees
-- the old slot or the new one, never neither), and the key holds as many slots after
-- as before. Only where that would be wrong, the slot is freed and not passed on:
--   * the key's slots are above its rule's concurrency (a limit lowered: running jobs
--     finish first), or the rule has a rate (each start is counted: the claim of 0023
--     records it), or no rule governs the key any more;
--   * the job's queue is paused, has a limit of its own (a rate, fair turns, whose
--     claims take turns between keys, or a concurrency limit, counted in stripes) or is
--     not one of the claiming worker's queues.
-- Then the five-argument claim (schema 25's, restated below with one change; workers of
-- the previous release call it too) takes what is left of max_jobs. The worker passes
-- keys on for a moment at a time (jobq.limits.gate.PASS_FOR): its claim after that frees
-- its slots and leaves every key to that claim's decision, so no worker keeps a key
-- for longer.
--
-- Returns the jobs claimed as the claim of 0023 does: the passed ones first, each with
-- whether its advisory lock was taken and whether it holds a slot.
CREATE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint,
                                   freed_ids bigint[], freed_leases bigint[])
RETURNS TABLE (job jobs, locked boolean, slotted boolean) LANGUAGE plpgsql AS $$
DECLARE
    got integer;
    stamp timestamptz := clock_timestamp();  -- one claimed_at for the claim, as in 0023
BEGIN
    RETURN QUERY
        WITH freed AS (
            DELETE FROM jobq_limit_slots AS s USING unnest(freed_ids, freed_leases) AS r(id, lease)
            WHERE s.job_id = r.id AND s.lease = r.lease RETURNING s.queue, s.concurrency_key AS k),
        passing AS MATERIALIZED (  -- the keys' slots that may pass on, how many by queue and key
            SELECT f.queue, f.k, count(*)::integer AS n FROM freed AS f
            LEFT JOIN jobq_queues AS q ON q.name = f.queue
            WHERE f.k IS NOT NULL AND f.queue = ANY(queues)
            AND (q.name IS NULL OR (q.paused_at IS NULL AND q.concurrency IS NULL AND q.rate_count IS NULL AND NOT q.fair))
            GROUP BY f.queue, f.k),
        ruled AS (
            SELECT p.queue, p.k, p.n, r.concurrency FROM passing AS p, LATERAL jobq_limit_rule(p.k) AS r
            WHERE r.concurrency IS NOT NULL AND r.rate_count IS NULL),
        kept AS (  -- read before this statement's delete: the freed slots are counted
            SELECT r.* FROM ruled AS r LEFT JOIN jobq_limit_key_use(ARRAY(SELECT k FROM ruled)) AS used ON used.k = r.k
            WHERE coalesce(used.n, 0) <= r.concurrency),
        next AS (
            SELECT n.id FROM kept AS m, LATERAL (
                SELECT j.id FROM jobs AS j WHERE j.status = 'pending' AND j.queue = m.queue AND j.concurrency_key = m.k
                AND j.run_at <= now() ORDER BY j.priority DESC, j.run_at, j.id LIMIT m.n FOR UPDATE SKIP LOCKED) AS n
            LIMIT greatest(max_jobs, 0)),
        claimed AS (
            UPDATE jobs AS j SET status = 'claimed', claimed_at = stamp, heartbeat_at = now(),
                started_at = NULL, worker_id = worker, lease = nextval('jobs_lease_seq')
            WHERE j.id = ANY(ARRAY(SELECT x.id FROM next AS x)) AND j.status IN ('pending', 'claimed', 'running')
            RETURNING j.*),
        slots AS (
            INSERT INTO jobq_limit_slots (job_id, lease, queue, concurrency_key)
            SELECT c.id, c.lease, c.queue, c.concurrency_key FROM claimed AS c)
        SELECT c::jobs, pg_try_advisory_lock(lock_base | c.id), true FROM claimed AS c
        ORDER BY c.priority DESC, c.run_at, c.id;
    GET DIAGNOSTICS got = ROW_COUNT;
    IF got < max_jobs THEN
        RETURN QUERY SELECT * FROM jobq_claim_limited(queues, worker, max_jobs - got, scan, lock_base);
    END IF;
END
$$;

-- The claim of schema 25, restated whole with one change. In a queue without fair turns
-- it read its first scan (200) due jobs once, whatever their keys: while a worker keeps
-- its keys (passing them on, or freeing and taking them again in one transaction), the
-- oldest due jobs are often all of those keys, and another worker's claim, reading only
-- them, took nothing while other keys were free (100 keys at concurrency 1, W = 8: one of
-- the two workers idle for a second or more in about one drain in ten, the drain at one
-- worker's speed meanwhile). Now a pass that took nothing reads again past the keys it
-- found full (their jobs left out of the candidates), up to three passes, as a fair
-- queue's claim goes round in passes; a pass that took something ends the queue's
-- claim as before.

-- The claim under limits: up to max_jobs due pending jobs of some queues (paused ones
-- left out; queues in name order, jobs in claim order within each, or in turns between
-- keys for a fair queue), each taken only while its queue and its key have a free slot
-- and rate. Set-based: a handful of statements per queue, not per job.
--   1. A limited (or fair) queue's lock is waited for (queues in name order: no
--      deadlock): shared, then some of its stripes' locks tried (waited for only when
--      none could be had: the claim then holds no other stripe of the queue), for a
--      queue limited by concurrency alone; exclusive otherwise. Then its slots and
--      starts are counted by statements that start after those locks.
--   1b. No rule on keys, no rate, not fair: the queue's due jobs are claimed, as many
--      as its free places allow, by one statement (2 and 3 are for the others).
--   2. Up to scan candidates are read without row locks (in a queue without fair
--      turns, after a pass that took nothing, past the keys that pass found full, up
--      to three passes); the rules of their keys are
--      read; each key's lock is only tried (a key another claim is deciding right now
--      is skipped this time, so two claims never wait on each other in opposite
--      orders), then the keys' slots and starts counted, after those locks.
--   3. The candidates are chosen in order against what is left of each limit; the
--      chosen rows are locked SKIP LOCKED (one another claim took is simply not taken),
--      their starts recorded, and they are claimed (new lease) with their slots
--      inserted and their advisory locks taken, by one statement.
-- Returns each job claimed, whether its advisory lock was taken, and whether it holds
-- a slot.
CREATE OR REPLACE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint)
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
    try_conc integer[];
    try_rate integer[];
    try_period integer[];
    lock_keys text[];
    lock_conc integer[];
    lock_rate integer[];
    lock_period integer[];
    pos integer;
    k text;
    slot_keys text[];
    rate_keys text[];
    chosen bigint[];
    lockable bigint[];
    stamp timestamptz;
    before_pass integer;
    got integer;
    has_rules boolean := EXISTS (SELECT FROM jobq_limits);
    stripes integer;
    exclusive boolean;
    use_s integer[];
    use_n integer[];
    held integer[];
    slot_stripes integer[];
    stripe_pos integer;
    home integer;
    s integer;
    room integer;
    busy integer;
    -- Without a rule on keys, no candidate is refused for its key: the first ones do.
    scan_n integer := CASE WHEN has_rules THEN scan ELSE least(scan, max_jobs) END;
BEGIN
    FOREACH q IN ARRAY ARRAY(SELECT DISTINCT x FROM unnest(queues) AS u(x) ORDER BY x) LOOP
        EXIT WHEN taken >= max_jobs;
        qrow := NULL;
        SELECT * INTO qrow FROM jobq_queues WHERE name = q;
        CONTINUE WHEN qrow.paused_at IS NOT NULL;
        queue_free := max_jobs - taken;
        use_s := NULL;
        use_n := NULL;
        held := '{}';
        slot_stripes := '{}';
        stripe_pos := 0;
        IF qrow.concurrency IS NOT NULL OR qrow.rate_count IS NOT NULL OR qrow.fair THEN
            IF qrow.concurrency IS NOT NULL THEN
                stripes := least(16, qrow.concurrency);
                -- The slots of the queue by stripe (-1: none), a guess before the locks.
                SELECT array_agg(u.stripe), array_agg(u.n) INTO use_s, use_n
                FROM (SELECT coalesce(l.stripe, -1)::integer AS stripe, count(*)::integer AS n
                      FROM jobq_limit_slots AS l WHERE l.queue = q GROUP BY 1) AS u;
            END IF;
            exclusive := qrow.concurrency IS NULL OR qrow.rate_count IS NOT NULL OR qrow.fair
                         OR -1 = ANY(coalesce(use_s, '{}'));
            IF exclusive THEN
                PERFORM pg_advisory_xact_lock(x'6a71'::integer, hashtext('queue ' || q));
                IF qrow.concurrency IS NOT NULL THEN
                    held := ARRAY(SELECT generate_series(0, stripes - 1));
                END IF;
            ELSE
                PERFORM pg_advisory_xact_lock_shared(x'6a71'::integer, hashtext('queue ' || q));
                home := ((hashtext(worker) % stripes) + stripes) % stripes;
                room := 0;
                busy := NULL;
                FOR i IN 0..stripes - 1 LOOP
                    EXIT WHEN room >= queue_free;
                    s := (home + i) % stripes;
                    CONTINUE WHEN qrow.concurrency / stripes + (s < qrow.concurrency % stripes)::integer
                                  <= coalesce(use_n[array_position(use_s, s)], 0);
                    IF pg_try_advisory_xact_lock(x'6a71'::integer, hashtext('stripe ' || s || ' ' || q)) THEN
                        held := held || s;
                        room := room + qrow.concurrency / stripes + (s < qrow.concurrency % stripes)::integer
                                - coalesce(use_n[array_position(use_s, s)], 0);
                    ELSIF busy IS NULL THEN
                        busy := s;
                    END IF;
                END LOOP;
                IF cardinality(held) = 0 AND busy IS NOT NULL THEN  -- every free stripe is being decided: wait for one
                    PERFORM pg_advisory_xact_lock(x'6a71'::integer, hashtext('stripe ' || busy || ' ' || q));
                    held := ARRAY[busy];
                END IF;
            END IF;
            IF qrow.concurrency IS NOT NULL THEN
                -- The slots counted again after the locks: the free places of the stripes
                -- held, one element a place, in the order the stripes were taken.
                SELECT array_agg(u.stripe), array_agg(u.n) INTO use_s, use_n
                FROM (SELECT coalesce(l.stripe, -1)::integer AS stripe, count(*)::integer AS n
                      FROM jobq_limit_slots AS l WHERE l.queue = q GROUP BY 1) AS u;
                slot_stripes := ARRAY(SELECT h.s FROM unnest(held) WITH ORDINALITY AS h(s, i),
                    LATERAL generate_series(1, least(queue_free, qrow.concurrency / stripes
                        + (h.s < qrow.concurrency % stripes)::integer - coalesce(use_n[array_position(use_s, h.s)], 0)))
                    ORDER BY h.i LIMIT greatest(queue_free, 0));
                queue_free := least(queue_free, cardinality(slot_stripes),
                    qrow.concurrency - coalesce((SELECT sum(x) FROM unnest(use_n) AS x), 0)::integer);
                IF NOT exclusive AND -1 = ANY(coalesce(use_s, '{}')) THEN
                    queue_free := 0;  -- slots without a stripe since the guess: the next claim sees them whole
                END IF;
            END IF;
            IF qrow.rate_count IS NOT NULL THEN
                queue_free := least(queue_free, jobq_limit_rate_left('queue ' || q, qrow.rate_count, qrow.rate_seconds));
            END IF;
            IF qrow.fair THEN
                queue_free := least(queue_free, 10);  -- no worker prefetches a long run of one key
            END IF;
        END IF;
        -- No rule on keys, no rate, not fair: every due job the queue's slots allow is
        -- taken, in claim order, by one statement as the plain claim's (its candidates
        -- locked SKIP LOCKED as read: claims of different stripes take different jobs).
        IF NOT has_rules AND qrow.rate_count IS NULL AND NOT coalesce(qrow.fair, false) THEN  -- no row: no limit
            CONTINUE WHEN queue_free <= 0;
            stamp := clock_timestamp();  -- one claimed_at for the claim, as below
            RETURN QUERY
                WITH due AS (SELECT j.id FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
                             ORDER BY j.priority DESC, j.run_at, j.id LIMIT queue_free FOR UPDATE SKIP LOCKED),
                claimed AS (
                    UPDATE jobs AS j SET status = 'claimed', claimed_at = stamp, heartbeat_at = now(),
                        started_at = NULL, worker_id = worker, lease = nextval('jobs_lease_seq')
                    FROM due WHERE j.id = ANY(ARRAY(SELECT d.id FROM due AS d)) AND j.id = due.id
                    AND j.status IN ('pending', 'claimed', 'running') RETURNING j.*),
                slots AS (
                    INSERT INTO jobq_limit_slots (job_id, lease, queue, concurrency_key, stripe)
                    SELECT c.id, c.lease, c.queue, c.concurrency_key, slot_stripes[row_number() OVER (ORDER BY c.id)]
                    FROM claimed AS c WHERE qrow.concurrency IS NOT NULL)
                SELECT c::jobs, pg_try_advisory_lock(lock_base | c.id), qrow.concurrency IS NOT NULL
                FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
            GET DIAGNOSTICS got = ROW_COUNT;
            taken := taken + got;
            CONTINUE;
        END IF;
        -- A fair queue's claim goes round its keys in passes (a job of each key a pass);
        -- any other queue's, once over its first scan due jobs.
        FOR pass IN 1..CASE WHEN qrow.fair THEN 10 ELSE 3 END LOOP
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
                      AND (j.concurrency_key IS NULL OR j.concurrency_key <> ALL(full_keys))
                      ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan_n) AS j) AS c;
            END IF;
            EXIT WHEN cand_ids IS NULL;
            -- The rules of the candidates' keys not decided yet (jobq_limit_rule's choice,
            -- as one join of the few rules with the keys).
            SELECT array_agg(r.k), array_agg(r.concurrency), array_agg(r.rate_count), array_agg(r.rate_seconds)
            INTO rule_keys, rule_conc, rule_rate, rule_period
            FROM (SELECT DISTINCT ON (d.k) d.k, l.concurrency, l.rate_count, l.rate_seconds
                  FROM (SELECT DISTINCT u.k FROM unnest(cand_keys) AS u(k)
                        WHERE u.k IS NOT NULL AND NOT u.k = ANY(full_keys)) AS d
                  JOIN jobq_limits AS l ON l.pattern = d.k OR (right(l.pattern, 1) = '*' AND starts_with(d.k, left(l.pattern, -1)))
                  ORDER BY d.k, l.pattern = d.k DESC, length(l.pattern) DESC) AS r;
            rule_keys := coalesce(rule_keys, '{}');
            -- Only as many keys' locks as this claim can use are tried, those whose slots
            -- look free (read before the locks: a guess, checked after them), in an order
            -- of this worker's own: concurrent claims over the same candidates then lock
            -- mostly different keys, where each locking all of them left the others none.
            -- A key not tried, or whose lock another claim holds, is left alone this time.
            SELECT coalesce(array_agg(t.k ORDER BY hashtext(t.k || worker)), '{}'),
                   array_agg(t.concurrency ORDER BY hashtext(t.k || worker)),
                   array_agg(t.rate_count ORDER BY hashtext(t.k || worker)),
                   array_agg(t.rate_seconds ORDER BY hashtext(t.k || worker))
            INTO try_keys, try_conc, try_rate, try_period
            FROM unnest(rule_keys, rule_conc, rule_rate, rule_period) AS t(k, concurrency, rate_count, rate_seconds)
            LEFT JOIN jobq_limit_key_use(rule_keys) AS used ON used.k = t.k
            WHERE t.concurrency IS NULL OR coalesce(used.n, 0) < t.concurrency;
            lock_keys := '{}';
            lock_conc := '{}';
            lock_rate := '{}';
            lock_period := '{}';
            FOR i IN 1..cardinality(try_keys) LOOP
                EXIT WHEN cardinality(lock_keys) >= queue_free;
                IF pg_try_advisory_xact_lock(x'6a71'::integer, hashtext('key ' || try_keys[i])) THEN
                    lock_keys := lock_keys || try_keys[i];
                    lock_conc := lock_conc || try_conc[i];
                    lock_rate := lock_rate || try_rate[i];
                    lock_period := lock_period || try_period[i];
                END IF;
            END LOOP;
            -- What each locked key has left: its slots and starts counted by statements that
            -- start after its lock is held.
            SELECT coalesce(array_agg(least(u.conc - coalesce(used.n, 0)::integer,
                       CASE WHEN u.rate IS NOT NULL THEN jobq_limit_rate_left('key ' || u.k, u.rate, u.period) END)
                   ORDER BY u.i), '{}')
            INTO key_left
            FROM unnest(lock_keys, lock_conc, lock_rate, lock_period) WITH ORDINALITY AS u(k, conc, rate, period, i)
            LEFT JOIN jobq_limit_key_use(lock_keys) AS used ON used.k = u.k;
            -- Choose in order, against what each limit has left: a job without a key, or of
            -- a key under no rule (and not decided by an earlier pass), or of a locked key
            -- while it has some left; up to the queue's free places.
            chosen := '{}';
            FOR i IN 1..array_length(cand_ids, 1) LOOP
                EXIT WHEN queue_free <= 0;
                k := cand_keys[i];
                IF k IS NOT NULL THEN
                    pos := array_position(lock_keys, k);
                    IF pos IS NOT NULL THEN
                        CONTINUE WHEN key_left[pos] IS NOT NULL AND key_left[pos] <= 0;
                        key_left[pos] := key_left[pos] - 1;
                    ELSIF k = ANY(rule_keys) OR k = ANY(full_keys) THEN
                        CONTINUE;  -- its lock not taken, or decided by an earlier pass
                    END IF;
                END IF;
                chosen := chosen || cand_ids[i];
                queue_free := queue_free - 1;
            END LOOP;
            -- Each key whose use was read is decided for this claim: a later pass or queue
            -- reads it again (after the slots this one took) only if it has some left.
            full_keys := full_keys || ARRAY(SELECT u.k FROM unnest(rule_keys) AS u(k) EXCEPT
                SELECT l.k FROM unnest(lock_keys, key_left) AS l(k, lft) WHERE l.lft IS NULL OR l.lft > 0);
            lockable := ARRAY(SELECT j.id FROM jobs AS j WHERE j.id = ANY(chosen) AND j.status = 'pending'
                              FOR UPDATE SKIP LOCKED);
            slot_keys := ARRAY(SELECT u.k FROM unnest(lock_keys, lock_conc) AS u(k, c) WHERE c IS NOT NULL);
            rate_keys := ARRAY(SELECT u.k FROM unnest(lock_keys, lock_rate) AS u(k, r) WHERE r IS NOT NULL);
            stamp := clock_timestamp();  -- a start is the claim: its claimed_at is when its starts are recorded
            IF qrow.rate_count IS NOT NULL OR cardinality(rate_keys) > 0 THEN
                INSERT INTO jobq_limit_starts (scope, at, n)
                    SELECT 'key ' || j.concurrency_key, stamp, count(*) FROM jobs AS j
                    WHERE j.id = ANY(lockable) AND j.concurrency_key = ANY(rate_keys) GROUP BY j.concurrency_key
                    UNION ALL SELECT 'queue ' || q, stamp, cardinality(lockable)
                    WHERE qrow.rate_count IS NOT NULL AND cardinality(lockable) > 0;
            END IF;
            RETURN QUERY
                WITH claimed AS (
                    UPDATE jobs AS j SET status = 'claimed', claimed_at = stamp, heartbeat_at = now(),
                        started_at = NULL, worker_id = worker, lease = nextval('jobs_lease_seq')
                    WHERE j.id = ANY(lockable) AND j.status IN ('pending', 'claimed', 'running') RETURNING j.*),
                slots AS (
                    INSERT INTO jobq_limit_slots (job_id, lease, queue, concurrency_key, stripe)
                    SELECT c.id, c.lease, c.queue, c.concurrency_key,
                           slot_stripes[stripe_pos + row_number() OVER (ORDER BY c.id)]
                    FROM claimed AS c
                    WHERE qrow.concurrency IS NOT NULL OR c.concurrency_key = ANY(slot_keys))
                SELECT c::jobs, pg_try_advisory_lock(lock_base | c.id),
                       qrow.concurrency IS NOT NULL OR coalesce(c.concurrency_key = ANY(slot_keys), false)
                FROM claimed AS c ORDER BY array_position(chosen, c.id);
            GET DIAGNOSTICS got = ROW_COUNT;
            taken := taken + got;
            stripe_pos := stripe_pos + got;
            queue_free := queue_free + (cardinality(chosen) - got);  -- rows another claim took: not ours
            IF qrow.fair THEN
                UPDATE jobq_queues SET fair_cursor = (SELECT max(u.k) FROM unnest(cand_keys) AS u(k)
                    WHERE u.k IS NOT NULL AND u.k <= coalesce(cand_keys[array_length(cand_keys, 1)], u.k))
                WHERE name = q AND cand_keys[array_length(cand_keys, 1)] IS NOT NULL;
            END IF;
            EXIT WHEN taken >= max_jobs;
            IF qrow.fair THEN
                EXIT WHEN taken = before_pass;
            ELSE
                EXIT WHEN taken > before_pass OR cardinality(cand_ids) < scan_n;
            END IF;
        END LOOP;
    END LOOP;
END
$$;
