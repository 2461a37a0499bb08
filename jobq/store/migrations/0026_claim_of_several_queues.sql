-- jobq schema 26: the claim of a worker of several queues reads each through the claim
-- index. The claim (jobq.store.sql.leases.JOB_CLAIM) reads each queue's due jobs in
-- claim order, LIMIT the claim's size FOR UPDATE SKIP LOCKED, and merges them. The
-- planner costs each queue's read for a queue of average size: where a queue holds
-- about as many due jobs as a claim takes (20 queues of 1,000, claims of 1,000), it read
-- each one by a scan of the whole of jobs_live and a sort, once per queue: 72 ms a claim,
-- against 33 through jobs_pending_claim_idx, and a worker of 20 queues drained at 18,500
-- jobs/s against 32,000 for one (benchmark/README.md, "A worker of many queues"). The
-- worker's claim session plans no bitmap scan already (CLAIM_SESSION_PLANNER); a session
-- without sequential scans would be wrong for the limits' statements (the claim under
-- limits fell to a tenth), so this function alone plans without them. A claim of one
-- queue keeps the statement as it was (its read is planned for that queue's size).
-- The candidates, locked, in claim order; the caller claims them (and the paused queues
-- are left out before: its OPEN_QUEUES).
CREATE FUNCTION jobq_claim_candidates(queues text[], n integer)
RETURNS TABLE (id bigint, priority smallint, run_at timestamptz) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
BEGIN
    RETURN QUERY
        SELECT c.id, c.priority, c.run_at FROM unnest(queues) AS q(queue), LATERAL (
            SELECT j.id, j.priority, j.run_at FROM jobs AS j
            WHERE j.status = 'pending' AND j.queue = q.queue AND j.run_at <= now()
            ORDER BY j.priority DESC, j.run_at, j.id LIMIT n FOR UPDATE SKIP LOCKED) AS c
        ORDER BY c.priority DESC, c.run_at, c.id LIMIT n;
END
$$;
