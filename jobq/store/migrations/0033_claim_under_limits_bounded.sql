-- jobq schema 33: the claim under limits reads a bounded number of rows, whatever the
-- backlog of one key and whatever the planner believes of jobs_live.
--
-- Found measuring the claim under rules on keys (100 keys at concurrency 1, and one key
-- with a long backlog, "tenant:A" with 200,000 due jobs and "tenant:B" with 100; PostgreSQL
-- 16, benchmark/README.md, "Schema 33"):
--   * a claim that found its first due jobs all of keys already full read on past those
--     keys (schema 30's second and third passes: the claim index in claim order, every
--     row of a full key read and left out), so with one key's long backlog in front each
--     claim read the whole of it, twice: 40 ms a claim of 2 jobs with accurate statistics
--     (the backlog read through the index), more than 100 ms otherwise; a drain of that
--     backlog at concurrency 1 went at a few dozen jobs a second. Now the first pass reads
--     the first scan due jobs, whatever their keys (a range of the claim index that stops
--     there); the second, if the first took nothing, walks the keys (jobs_pending_key_idx,
--     one probe to the next key, one to its next due job), past the keys already decided,
--     as a fair queue's claim walks them (jobq_key_heads, below, serves both). A job
--     without a key is found among the first scan due jobs, as in a fair queue, not behind
--     a full key's whole backlog.
--   * the plans of these PL/pgSQL functions are kept by each session, and the planner
--     makes a generic one after five calls: a worker idle on an empty queue whose
--     statistics say so (autovacuum analyses jobs_live once a drain has emptied it) plans
--     every read of jobs as if the table were empty, then keeps those plans when a backlog
--     arrives, until the next analysis. Such a plan read the due jobs by a sequential scan
--     and a sort of all of them (a claim of 50 with 200,000 due jobs: 68 ms instead of
--     3 ms; a burst of 100,000 keyed jobs drained at a quarter of its speed for its first
--     seconds), and, with sequential scans turned off, by a whole scan of whichever index
--     looked smallest (jobs_pending_created_idx, every row filtered). The functions now
--     leave the planner only ordered index ranges: sequential and bitmap scans off, and
--     sorts off (a read in claim or key order then has one plan, the range of the index in
--     that order, which stops at its LIMIT); the lock of the chosen jobs, which has no
--     order, is written so that only the primary key can serve it.
-- The decisions are schema 30's otherwise: the same locks, counts and choice, the same
-- signatures (workers of the previous release claim through these bodies too). A key
-- passed on (the seven-argument claim) is found by a range of jobs_pending_key_idx in
-- key order: an equality on the key let the planner serve it from the claim index, every
-- due job of other keys ahead of it read and left out (133 a probe on average in a drain
-- of 100 keys; all of the long backlog in the case above).

-- The next due job of each of up to n keys of a queue, in key order after `after` (from
-- the first key when NULL), wrapping round to the first keys up to it, past the keys in
-- `skip`; first, the next due job without a key among the queue's first `scan` due jobs.
-- One probe of jobs_pending_key_idx to the next key and one to that key's next due job
-- (a range in key order: only that index serves it without a sort). Each head comes with
-- its priority and run_at (claim order). Schema 20's jobq_fair_candidates, which it
-- replaces, walked the same way without skipping keys.
CREATE FUNCTION jobq_key_heads(q text, after text, n integer, scan integer, skip text[])
RETURNS TABLE (id bigint, concurrency_key text, priority smallint, run_at timestamptz) LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off AS $$
#variable_conflict use_column
DECLARE
    k text := coalesce(after, '');
    nxt text;
    walked integer := 0;
    wrapped boolean := false;
BEGIN
    RETURN QUERY SELECT s.id, NULL::text, s.priority, s.run_at FROM (
        SELECT j.id, j.concurrency_key, j.priority, j.run_at FROM jobs AS j
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
        CONTINUE WHEN k = ANY(skip);
        walked := walked + 1;
        RETURN QUERY SELECT j.id, j.concurrency_key, j.priority, j.run_at FROM jobs AS j
            WHERE j.status = 'pending' AND j.queue = q AND j.concurrency_key >= k AND j.concurrency_key <= k
            AND j.run_at <= now() ORDER BY j.concurrency_key, j.priority DESC, j.run_at, j.id LIMIT 1;
    END LOOP;
END
$$;

-- The claim under limits of schema 30, restated whole with the changes above: the first
-- pass bounded, the second a walk of the keys, the lock by primary key, the planner's
-- settings. (Schema 30's comment on each step holds.)
CREATE OR REPLACE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint)
RETURNS TABLE (job jobs, locked boolean, slotted boolean) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off AS $$
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
        -- any other queue's reads its first scan due jobs, then, if that took nothing,
        -- the next due job of each key it has not decided.
        FOR pass IN 1..CASE WHEN qrow.fair THEN 10 ELSE 2 END LOOP
            EXIT WHEN queue_free <= 0;
            before_pass := taken;
            IF qrow.fair THEN
                SELECT array_agg(f.id ORDER BY f.n), array_agg(f.concurrency_key ORDER BY f.n)
                INTO cand_ids, cand_keys
                FROM jobq_key_heads(q, (SELECT p.fair_cursor FROM jobq_queues AS p WHERE p.name = q),
                                    queue_free, scan, '{}') WITH ORDINALITY AS f(id, concurrency_key, priority, run_at, n);
            ELSIF pass = 1 THEN
                -- The first scan_n due jobs in claim order, whatever their keys (a range of
                -- jobs_pending_claim_idx that stops there; those of keys already decided
                -- are passed over by the choice below).
                SELECT array_agg(c.id ORDER BY c.n), array_agg(c.concurrency_key ORDER BY c.n) INTO cand_ids, cand_keys
                FROM (SELECT j.id, j.concurrency_key, row_number() OVER () AS n FROM (SELECT j.id, j.concurrency_key
                      FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
                      ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan_n) AS j) AS c;
            ELSE
                -- The next due job of each key not decided yet, up to scan_n keys (a walk of
                -- jobs_pending_key_idx, one probe per key), in claim order.
                SELECT array_agg(h.id ORDER BY h.priority DESC, h.run_at, h.id),
                       array_agg(h.concurrency_key ORDER BY h.priority DESC, h.run_at, h.id)
                INTO cand_ids, cand_keys
                FROM jobq_key_heads(q, NULL, scan_n, 0, full_keys) AS h;
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
            -- Locked by id (the primary key): OFFSET 0 keeps the test of the status outside
            -- the scan, where it cannot make a partial index of pending jobs usable (see
            -- the top of this file); rows read locked are those still live, the pending
            -- ones kept.
            lockable := ARRAY(SELECT l.id FROM (SELECT j.id, j.status FROM jobs AS j WHERE j.id = ANY(chosen)
                                  AND j.status IN ('pending', 'claimed', 'running') OFFSET 0 FOR UPDATE SKIP LOCKED) AS l
                              WHERE l.status = 'pending');
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

DROP FUNCTION jobq_fair_candidates(text, text, integer, integer);

-- The claim that passes keys on (schema 30), restated whole with the changes above: the
-- key's next due job read from jobs_pending_key_idx in key order, the planner's settings.
CREATE OR REPLACE FUNCTION jobq_claim_limited(queues text[], worker text, max_jobs integer, scan integer, lock_base bigint,
                                   freed_ids bigint[], freed_leases bigint[])
RETURNS TABLE (job jobs, locked boolean, slotted boolean) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off AS $$
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
                SELECT j.id FROM jobs AS j WHERE j.status = 'pending' AND j.queue = m.queue
                AND j.concurrency_key >= m.k AND j.concurrency_key <= m.k AND j.run_at <= now()
                ORDER BY j.concurrency_key, j.priority DESC, j.run_at, j.id LIMIT m.n FOR UPDATE SKIP LOCKED) AS n
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


-- JIT off wherever a plan type is: a plan whose only path is a type turned off is costed
-- ten billion, far above jit_above_cost, and PostgreSQL built with LLVM (Debian's and
-- most hosted servers, where jit is on by default) compiled such statements at each call.
-- Measured on PostgreSQL 15 while writing this file: with sorts off and JIT on, the claim
-- under limits' read of the rules (a sort of the few keys) and the counters' trigger of
-- its update (the settings hold for the triggers a function fires) took 200-1,100 ms
-- each, and 100 keys at concurrency 1 drained at 80 jobs a second. The functions of
-- earlier schemas that turn a plan type off were not seen compiling (their statements
-- always have a path left), but one changed statement would do it: they turn JIT off
-- too. No statement of jobq's is long enough for compiling it to pay.
ALTER FUNCTION jobq_workflow_tally_apply() SET jit = off;
ALTER FUNCTION jobs_finished_after_update() SET jit = off;
ALTER FUNCTION jobq_workflow_finished(bigint[], bigint[], text[], jsonb[], text[], boolean[]) SET jit = off;
ALTER FUNCTION jobq_workflow_release(bigint, text[]) SET jit = off;
ALTER FUNCTION jobq_limit_key_use(text[]) SET jit = off;
ALTER FUNCTION jobq_claim_candidates(text[], integer) SET jit = off;
