-- jobq schema 22: a statement's finished steps are settled together, at the end of the
-- statement, instead of one trigger call per finished row.
--
-- Profiled (benchmark/README.md, "Schema 22"): in a fan-out 1 -> 10,000 -> 1, each middle
-- step's outcome ran schema 21's row trigger (jobs_left_unfinished: find the row again in
-- its finished partition, then jobq_workflow_settle: one statement of four parts, two
-- probes of the tally among them), about 50 us a row of server CPU on top of an
-- independent job's, and one tally row per parent for the commit to take back. Now:
--   * jobs_leaving_unfinished, a BEFORE DELETE row trigger with schema 21's WHEN (so a
--     job outside any workflow that nobody waits for stops at the same two tests), fires
--     for a row moving out of jobs_live or jobs_waiting (PostgreSQL fires a moved row's
--     BEFORE DELETE triggers on its old partition) or deleted. It does one thing: it
--     says, in the transaction-local setting jobq.finishing, that the statement has such
--     rows; its WHEN tests that setting last, so it runs once per statement, not per row.
--   * jobs_finished_after_update and _after_delete, statement-level triggers whose WHEN
--     is that setting (a statement that moved no step pays one setting read and no call),
--     read the statement's transition tables (the counters' triggers already have them
--     captured): the rows that left an unfinished status for a finished one (or were
--     deleted), with their outcome, result and error, to jobq_workflow_finished.
--   * jobq_workflow_finished settles all of them in one statement: their edges (settled
--     once: outcome IS NULL), each child's committed count read with them and what this
--     statement owes it summed. A child all of whose remaining parents finished done in
--     this statement, that this transaction owes nothing yet, is released here as before
--     (its count to 0 under its row lock, re-read by the UPDATE, then jobq_workflow_release),
--     so that the claim sent in the same transaction can take it: a chain's next step, a
--     fan-out's children. Every other child gets one tally row for the statement (its
--     parents summed: a batch of 50 middle steps writes 1 row, not 50), applied at
--     commit as in schema 21, children locked in (workflow, name) order.
--   * whether this transaction has tally rows not yet applied (a round open) is the
--     transaction-local setting jobq.tally_open (turned on by the row that opens a round,
--     off by the apply's DELETE: two small triggers on the tally) instead of a probe of
--     the tally; the fast path probes the tally only while a round is open. A savepoint
--     rolled back takes its settings back with its rows and its events.
-- jobq.finishing is cleared by the statement trigger of the statement that set it: no
-- trigger of jobq's updates or deletes jobs while a statement's rows are being written
-- (the spawn's BEFORE UPDATE trigger only inserts), so no nested statement can take it.
-- Statement-level triggers are jobs' own: a DELETE aimed at a partition itself (DELETE
-- FROM jobs_live ...) fires none of them and settles nothing, where schema 15's row
-- trigger fired on the partition. jobq writes only to jobs; so must raw SQL that
-- deletes steps.
-- The release of a fan-out's 10,000 children is one UPDATE as in schema 21 (the move of
-- 10,000 rows from jobs_waiting to jobs_live is most of it, and no trigger of it runs
-- per row: jobq.releasing keeps jobs_leaving_unfinished's WHEN false).
-- What is decided, and under which lock, is schema 21's: "last" under the child's row
-- lock, in the parent's transaction and under its lease (a stale worker's write matches
-- no row: nothing moves, nothing is settled). Waiters' notifications (jobq_finished)
-- are sent by the same statement-level triggers.

-- This transaction's tally: each child owed its settled parents, a failure's reason.
-- The first row inserted while no round is open opens one (opens_round: the deferred
-- apply's event, schema 21).
CREATE FUNCTION jobq_workflow_owe(p_workflows bigint[], p_children text[], p_settled integer[], p_failures text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    open boolean := coalesce(current_setting('jobq.tally_open', true) = 'on', false);
BEGIN
    INSERT INTO jobq_workflow_tally (workflow_id, child, settled, failure, opens_round)
    SELECT o.workflow_id, o.child, o.settled, o.failure, NOT open AND o.i = 1
    FROM unnest(p_workflows, p_children, p_settled, p_failures) WITH ORDINALITY AS o(workflow_id, child, settled, failure, i);
END
$$;

-- The setting jobq.tally_open is on exactly while this transaction has a round open: a
-- row that opens one turns it on (whoever inserts it: jobq_workflow_owe, or schema 21's
-- jobs_spawn_with_outcome, whose own test of the tally opens rounds the same way), and
-- the apply's DELETE, which takes every row of the transaction, turns it off (a cascade's
-- settlements, made while the apply runs, open the next round). Nothing else deletes
-- from the tally (TRUNCATE fires neither).
CREATE FUNCTION jobq_workflow_tally_round() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobq.tally_open', CASE WHEN TG_OP = 'INSERT' THEN 'on' ELSE 'off' END, true);
    RETURN NEW;  -- the row, inserted as it is (NULL, and ignored, for the statement's trigger)
END
$$;
CREATE TRIGGER jobq_workflow_tally_opened BEFORE INSERT ON jobq_workflow_tally FOR EACH ROW WHEN (NEW.opens_round)
    EXECUTE FUNCTION jobq_workflow_tally_round();
CREATE TRIGGER jobq_workflow_tally_taken BEFORE DELETE ON jobq_workflow_tally FOR EACH STATEMENT
    EXECUTE FUNCTION jobq_workflow_tally_round();

-- Jobs that finished in one statement (p_outcomes: done, dead, cancelled, failed or
-- deleted), given as arrays: the awaited ones notified (jobq.wait), the steps' edges
-- settled and their children released now or owed at commit (see the top of this file).
-- A step's former job (replaced by retry_workflow) has no step row: nothing is settled.
CREATE FUNCTION jobq_workflow_finished(p_ids bigint[], p_workflows bigint[], p_outcomes text[], p_results jsonb[],
                                       p_errors text[], p_awaited boolean[])
RETURNS void LANGUAGE plpgsql
-- Its plans are kept (PL/pgSQL) and made for arrays of any length: probes of the keys
-- given (the steps' job index, the edges' and the steps' primary keys), never a scan of
-- a whole table that the planner, guessing the arrays' length, might prefer (a 50-row
-- batch hash-joined with every edge cost 2 ms).
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    owed_wfs bigint[];
    owed_children text[];
    owed integer[];
    failures text[];
    done_wfs bigint[];
    done_children text[];
    done_settled integer[];
    release_wfs bigint[];
    release_names text[];
BEGIN
    PERFORM pg_notify('jobq_finished', f.id::text) FROM unnest(p_ids, p_awaited) AS f(id, awaited) WHERE f.awaited;
    -- Each finished job's step found by its job (jobq_workflow_steps_job_idx: a probe per
    -- job, whatever the planner guesses of the arrays' length), then its open edges.
    WITH finished AS MATERIALIZED (
        SELECT f.*, (SELECT s.name FROM jobq_workflow_steps AS s WHERE s.job_id = f.id AND s.workflow_id = f.workflow_id)
                    AS step
        FROM unnest(p_ids, p_workflows, p_outcomes, p_results, p_errors) AS f(id, workflow_id, outcome, result, error)
        WHERE f.workflow_id IS NOT NULL),
    settled AS (UPDATE jobq_workflow_edges AS e SET outcome = f.outcome, result = f.result, error = f.error
        FROM finished AS f
        WHERE e.workflow_id = f.workflow_id AND e.parent = f.step AND e.outcome IS NULL
        RETURNING e.workflow_id, e.child, f.step AS parent, f.id AS job, f.outcome),
    by_child AS MATERIALIZED (
        SELECT s.workflow_id, s.child, count(*)::integer AS settled,
               min(format('parent step %s (job %s) ended %s', s.parent, s.job, s.outcome)) FILTER (WHERE s.outcome <> 'done')
               AS failure,
               bool_and(s.outcome = 'done') AS done
        FROM settled AS s GROUP BY s.workflow_id, s.child),
    last AS (UPDATE jobq_workflow_steps AS c SET parents_left = 0
        FROM by_child AS b
        WHERE c.workflow_id = b.workflow_id AND c.name = b.child AND b.done AND c.parents_left = b.settled
          AND (current_setting('jobq.tally_open', true) IS DISTINCT FROM 'on'
               OR NOT EXISTS (SELECT FROM jobq_workflow_tally AS t WHERE t.xact = pg_current_xact_id()
                              AND t.workflow_id = c.workflow_id AND t.child = c.name))
        RETURNING c.workflow_id, c.name)
    SELECT (SELECT array_agg(workflow_id) FROM by_child WHERE NOT done),
           (SELECT array_agg(child) FROM by_child WHERE NOT done),
           (SELECT array_agg(settled) FROM by_child WHERE NOT done),
           (SELECT array_agg(failure) FROM by_child WHERE NOT done),
           (SELECT array_agg(workflow_id) FROM by_child WHERE done), (SELECT array_agg(child) FROM by_child WHERE done),
           (SELECT array_agg(settled) FROM by_child WHERE done),
           (SELECT array_agg(workflow_id) FROM last), (SELECT array_agg(name) FROM last)
    INTO owed_wfs, owed_children, owed, failures, done_wfs, done_children, done_settled, release_wfs, release_names;
    -- The children all of whose parents here finished done but that are not released
    -- (other parents left, or owed already in this transaction): owed as the others.
    IF cardinality(done_children) > coalesce(cardinality(release_names), 0) THEN
        SELECT owed_wfs || array_agg(d.workflow_id), owed_children || array_agg(d.child), owed || array_agg(d.settled),
               failures || array_agg(NULL::text)
        INTO owed_wfs, owed_children, owed, failures
        FROM (SELECT * FROM unnest(done_wfs, done_children, done_settled) AS d(workflow_id, child, settled)
              WHERE (d.workflow_id, d.child) NOT IN (SELECT * FROM unnest(release_wfs, release_names))) AS d;
    END IF;
    PERFORM jobq_workflow_release(w.workflow_id, w.names)
    FROM (SELECT r.workflow_id, array_agg(r.name) AS names FROM unnest(release_wfs, release_names) AS r(workflow_id, name)
          GROUP BY r.workflow_id ORDER BY r.workflow_id) AS w;
    IF owed_children IS NOT NULL THEN
        PERFORM jobq_workflow_owe(owed_wfs, owed_children, owed, failures);
    END IF;
END
$$;

-- A row leaves jobs_live or jobs_waiting (moved by an update, or deleted): the statement
-- has something for jobs_finished_after_* to look at. Runs once per statement (the
-- trigger's WHEN stops the rows after the first); the statement trigger clears it.
CREATE FUNCTION jobs_leaving_unfinished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobq.finishing', 'on', true);
    RETURN OLD;
END
$$;

-- The rows of an UPDATE that left an unfinished status for a finished one.
CREATE FUNCTION jobs_finished_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobq.finishing', 'off', true);
    PERFORM jobq_workflow_finished(array_agg(o.id), array_agg(o.workflow_id), array_agg(n.status), array_agg(n.result),
                                   array_agg(n.error), array_agg(coalesce(o.awaited, false)))
    FROM old_jobs AS o JOIN new_jobs AS n ON n.id = o.id
    WHERE (o.workflow_id IS NOT NULL OR o.awaited) AND o.status IN ('pending', 'claimed', 'running', 'waiting')
      AND n.status IN ('done', 'failed', 'dead', 'cancelled')
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

-- The unfinished rows of a DELETE: their outcome, and their error, 'deleted'.
CREATE FUNCTION jobs_finished_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobq.finishing', 'off', true);
    PERFORM jobq_workflow_finished(array_agg(o.id), array_agg(o.workflow_id), array_agg('deleted'::text),
                                   array_agg(NULL::jsonb), array_agg('deleted'::text), array_agg(coalesce(o.awaited, false)))
    FROM old_jobs AS o
    WHERE (o.workflow_id IS NOT NULL OR o.awaited) AND o.status IN ('pending', 'claimed', 'running', 'waiting')
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

DROP TRIGGER jobs_left_unfinished ON jobs;
DROP FUNCTION jobs_left_unfinished();
DROP FUNCTION jobq_workflow_settle(bigint, bigint, text, jsonb, text);

CREATE TRIGGER jobs_leaving_unfinished BEFORE DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status IN ('pending', 'claimed', 'running', 'waiting') AND (OLD.workflow_id IS NOT NULL OR OLD.awaited)
          AND (OLD.status <> 'waiting' OR current_setting('jobq.releasing', true) IS DISTINCT FROM 'on')
          AND current_setting('jobq.finishing', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobs_leaving_unfinished();
CREATE TRIGGER jobs_finished_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT
    WHEN (current_setting('jobq.finishing', true) = 'on')
    EXECUTE FUNCTION jobs_finished_after_update();
CREATE TRIGGER jobs_finished_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT
    WHEN (current_setting('jobq.finishing', true) = 'on')
    EXECUTE FUNCTION jobs_finished_after_delete();
