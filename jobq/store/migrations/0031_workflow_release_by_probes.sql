-- jobq schema 31: a workflow's release, settlement and tally read each row a bounded
-- number of times, whatever the statistics say.
--
-- Found by a benchmark that hung: a fan-out's root outcome (the release of its 10,000
-- children) ran on one core for more than ten minutes. Its plan (reproduced: the workflow
-- enqueued while jobs_waiting, jobq_workflow_steps and jobq_workflow_edges were analysed,
-- as autovacuum may analyse them in the middle of a large enqueue: every row not yet
-- committed, so the planner believes each table empty though its pages are there) read
-- the waiting rows as the outer side of a nested loop, and for each of them every step
-- of the workflow, keeping those whose name is in the array of names to release, one
-- comparison of text at a time: steps x steps x names/2 comparisons. A fan-out of 1,000
-- took 3 s and read about 505,000 step rows (against 7,001 now), one of 2,000 took 20 s,
-- one of 10,000 did not end. Nothing in the planner's choices of schema 21's statement bounded
-- it: a join of the waiting rows with the steps named, planned from those guesses.
--
-- The release is now one UPDATE with no join to plan:
--   * the jobs to move are found first, one probe of the steps' primary key per name
--     (an unnested array and a LATERAL subquery that its LIMIT keeps from being pulled up
--     into a join), and read by id through jobs_waiting's primary key;
--   * each moved job's parents' results and failures are a subquery of that job: its step
--     by job (the unique index), then that step's edges (the child index), in that order
--     (a LIMIT and an OFFSET keep either subquery from being pulled up into a join whose
--     order the guesses would choose: a first form, a plain join, read every edge of the
--     workflow for each job under the same statistics);
--   * the function sets its own planner settings (no sequential scan, no hash or merge
--     join; index scans, which its callers below turn off): it is also called on its own
--     (retry_workflow), where a sequential scan of jobs_waiting filtered by the array
--     would again compare every waiting row with every id.
-- The same rows are moved with the same columns as by schema 21 (same signature: workers
-- of the previous release call it too), and jobq.releasing is set around the move as
-- before. A release of 10,000 with accurate statistics costs what it did (one session,
-- taking turns: 290-380 ms of server CPU for the root's outcome either way on PostgreSQL
-- 15 beside other work; benchmark/README.md, "Schemas 31 and 32").
CREATE OR REPLACE FUNCTION jobq_workflow_release(p_workflow bigint, p_steps text[]) RETURNS void LANGUAGE sql
SET enable_seqscan = off SET enable_indexscan = on SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_nestloop = on
AS $$
    SELECT set_config('jobq.releasing', 'on', true);
    UPDATE jobs AS j SET status = 'pending', run_at = greatest(j.run_at, now()),
        (parent_results, parent_failures) = (
            SELECT coalesce(jsonb_object_agg(e.parent, e.result) FILTER (WHERE e.outcome = 'done'), '{}'),
                   jsonb_object_agg(e.parent, coalesce(e.error, e.outcome)) FILTER (WHERE e.outcome <> 'done')
            FROM (SELECT s.workflow_id, s.name FROM jobq_workflow_steps AS s WHERE s.job_id = j.id LIMIT 1) AS s,
                LATERAL (SELECT e.parent, e.outcome, e.result, e.error FROM jobq_workflow_edges AS e
                         WHERE e.workflow_id = s.workflow_id AND e.child = s.name OFFSET 0) AS e)
    WHERE j.id = ANY(ARRAY(
            SELECT s.job_id FROM unnest(p_steps) AS n(name), LATERAL (
                SELECT s.job_id FROM jobq_workflow_steps AS s WHERE s.workflow_id = p_workflow AND s.name = n.name LIMIT 1) AS s))
      AND j.status = 'waiting';
    SELECT set_config('jobq.releasing', 'off', true);
$$;

-- The statements that settle finished steps and apply the commit's tally join what they
-- update with what they were given (arrays, a CTE of the statement's finished steps).
-- Believing few rows of the table updated match (statistics never taken since the
-- tables were emptied, or taken mid-enqueue as above), the planner read that table as
-- the outer side of those joins, whole: a full scan of an index (schema 22 turned
-- sequential scans off, not those), each row matched against the whole inner side.
-- Cancelling a workflow of 4,000 waiting steps compared 32,004,000 pairs in its edges'
-- settlement (5.6 s on PostgreSQL 16; 80 ms now); a batch of 500 middle steps of a
-- fan-in of 10,000, under the statistics above, 5,000,000 (0.8-1 s a batch, against 40
-- ms). A bitmap scan needs an index condition, so with index scans off and bitmap scans
-- on every read of these tables is a probe by the keys of the statement (nested loops
-- whose inner side is a bitmap probe), never a whole index; with accurate statistics it
-- costs about what it did (a fan-in's batches in one session: 1.55 s against 1.51). The
-- worker's claim session turns bitmap scans off for its own statements
-- (jobq.store.sql.leases.CLAIM_SESSION_PLANNER); these settings are the functions' own,
-- for the length of their call.
ALTER FUNCTION jobq_workflow_finished(bigint[], bigint[], text[], jsonb[], text[], boolean[])
    SET enable_indexscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = on SET enable_tidscan = off;
ALTER FUNCTION jobq_workflow_tally_apply()
    SET enable_seqscan = off SET enable_indexscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = on
    SET enable_tidscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET enable_nestloop = on;
