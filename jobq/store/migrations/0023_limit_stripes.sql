-- jobq schema 23: what a limit costs a claim. Two changes to the claim under limits
-- (jobq_claim_limited, migration 0020; same signature, so workers of the previous
-- release claim through this body too):
--
-- Stripes. A queue limited by concurrency alone no longer serialises every claim of
-- the queue on one lock held to the claim's commit (8 workers' claims of a limit that
-- never binds waited for it five at a time). Its limit C is cut into S = least(16, C)
-- stripes, stripe s holding C / S places (plus one for the first C % S), and each slot
-- taken under the queue's limit records its stripe. A claim takes the queue's lock
-- shared, then tries the locks of as many stripes as it needs (those whose places look
-- free, in an order of its worker's own), counts their slots after those locks, and
-- takes at most their free places: claims of one stripe are serialised by its lock, so
-- no stripe ever holds more slots than its places, and the stripes together never more
-- than C. Only a claim that finds no stripe's lock free waits, for one stripe, holding
-- none. A claim that must see the whole queue at once (a rate or a fair queue, or
-- slots without a stripe: taken by a claim of schema 20, or while the queue had no
-- concurrency limit) takes the queue's lock exclusive, as before, which waits for every
-- stripe's claim; it too keeps each stripe within its places. A claim also takes
-- nothing while the queue's slots are C or more (a limit lowered: running jobs finish
-- first, as before).
--
-- One statement. Without rules on keys, rates or fair turns, a queue's due jobs are
-- claimed by one statement, as by the plain claim, their candidates locked SKIP LOCKED
-- as read (claims no longer serialised would otherwise read the same first candidates,
-- and all but one of them find those rows locked and take nothing).
--
-- The function is restated whole (0020's body with these changes: a migration never
-- edits an earlier one); jobq_limit_release and the reaper's sweep are unchanged.

ALTER TABLE jobq_limit_slots ADD COLUMN stripe smallint;

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
            EXIT WHEN taken = before_pass OR taken >= max_jobs;
        END LOOP;
    END LOOP;
END
$$;
