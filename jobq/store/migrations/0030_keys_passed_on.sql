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
-- Then the claim of schema 25 (the five-argument function, which workers of the previous
-- release call, unchanged) takes what is left of max_jobs. The worker passes keys on for
-- a moment at a time (jobq.limits.gate.PASS_FOR): its claim after that frees its slots
-- and leaves every key to the decision of 0025, so no worker keeps a key for longer.
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
        ruled AS (  -- jobq_limit_rule's choice: the exact pattern, else the longest prefix
            SELECT p.queue, p.k, p.n, r.concurrency FROM passing AS p, LATERAL (
                SELECT l.concurrency, l.rate_count FROM jobq_limits AS l
                WHERE l.pattern = p.k OR (right(l.pattern, 1) = '*' AND starts_with(p.k, left(l.pattern, -1)))
                ORDER BY l.pattern = p.k DESC, length(l.pattern) DESC LIMIT 1) AS r
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
