-- jobq schema 21: a fan-in's parents no longer take turns on their child's row.
--
-- Until now (schema 15) the row trigger of a parent's outcome settled its edges and
-- decremented each child's parents_left there and then, under the child's row lock: a
-- lock held to the end of the transaction, through the rest of the outcome statement
-- (the triggers of the batch's other rows), the next claim sent in the same round trip,
-- and the commit. The 10,000 middle steps of a fan-out 1 -> 10,000 -> 1 all decrement
-- the one callback's row, so the workers' outcome batches ran one at a time (the fan-in
-- took 2.9-3.3x the time of as many independent jobs). The children were also locked
-- row by row of the batch, each row's children in name order: two batches whose parents
-- share several children could lock them in opposite orders (a deadlock, one aborted).
--
-- Now the settlement is split in two, both in the outcome's transaction as before:
--   * the row trigger (jobs_left_unfinished, unchanged, calling jobq_workflow_settle)
--     settles the parent's edges (rows of the parent's own: no other writer) and notes
--     what each child is owed in jobq_workflow_tally, a row per transaction, parent and
--     child, inserted only (settled: parents finished; failure: why, when one did not
--     end done). No lock on any child, but for a child whose last unfinished parent
--     this is (a chain's next step, a fan-out's children), released right there as
--     before, so that the claim sent in the same transaction can take it.
--   * at commit, a deferred constraint trigger on the tally (jobq_workflow_tally_apply)
--     takes the transaction's rows at once, locks their children's step rows in
--     (workflow, name) order, decrements parents_left by what each is owed, cancels the
--     children a failure cancels (their job rows locked in id order) and releases the
--     children whose count reached 0 (jobq_workflow_release). "Last" is still decided
--     under the child's row lock, in the parent's transaction and under its lease (a
--     stale worker's write settles nothing, so owes nothing); the lock is held only
--     from the commit's start to its end, and one transaction's children are always
--     locked in the same order, whatever the order of the rows that settled them.
--   * a cancel that cascades (the cancelled children's rows leave jobs_waiting, their
--     own edges are settled and tallied) is applied by the next deferred event, in the
--     same commit: a chain of any depth is cancelled round by round, not by triggers
--     nested as deep as the chain (PostgreSQL's max_stack_depth). Each round locks its
--     children in order; two rounds are ordered by depth, not by name, so a cascade can
--     still meet another transaction's commit in a deadlock (as can an operator's
--     cancel_workflow, which locks the steps' jobs before their step rows): rare, and
--     PostgreSQL aborts one, whose writer retries.
--   * jobq.spawn's new parents are added to the children's count through the same
--     tally (a negative settled), at the spawner's commit: no child row locked early.
--
-- The tally is UNLOGGED: its rows are inserted and deleted by the same transaction (no
-- committed row ever exists), so there is nothing to recover after a crash.
-- REPEATABLE READ writers stay safe: the decrement is an UPDATE of the child's row, which
-- fails with a serialization error when another transaction changed it meanwhile.

CREATE UNLOGGED TABLE jobq_workflow_tally (
    xact        xid8    NOT NULL DEFAULT pg_current_xact_id(),
    workflow_id bigint  NOT NULL,
    child       text    NOT NULL,
    settled     integer NOT NULL,
    failure     text,
    opens_round boolean NOT NULL DEFAULT false
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000);
CREATE INDEX jobq_workflow_tally_xact_idx ON jobq_workflow_tally (xact, workflow_id, child);

-- A step's parent finished (p_outcome: done, dead, cancelled, failed or deleted): each
-- edge from it is settled once (outcome IS NULL; the edges' primary key). Then, for each
-- child:
--   * the parent done and the child's last unfinished parent (its committed count is 1,
--     read again under its row lock, and this transaction owes it nothing yet: no spawn,
--     no other parent): the count goes to 0 and the child is released here, in the
--     outcome statement, so that the claim sent with it (the same transaction) can take
--     it: a chain's next step, a fan-out's children. No other transaction can be
--     counting this child down (its other parents have all committed), so this early
--     lock waits on nobody's commit but an apply already under way, and deadlocks with
--     no other settlement.
--   * otherwise the child is owed one parent in this transaction's tally (a row per
--     parent and child, inserted only, summed at the apply; the first row may open a
--     round, see below): counted, cancelled or released at commit.
-- A step's former job (replaced by retry_workflow) has no step row: nothing is settled.
-- PL/pgSQL: its plans are kept, where a SQL function's would be made again at each call.
CREATE OR REPLACE FUNCTION jobq_workflow_settle(p_workflow bigint, p_job bigint, p_outcome text, p_result jsonb, p_error text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    released text[];
BEGIN
    WITH parent AS (SELECT s.name FROM jobq_workflow_steps AS s WHERE s.job_id = p_job AND s.workflow_id = p_workflow),
    settled AS (UPDATE jobq_workflow_edges AS e SET outcome = p_outcome, result = p_result, error = p_error
        FROM parent WHERE e.workflow_id = p_workflow AND e.parent = parent.name AND e.outcome IS NULL
        RETURNING e.child, parent.name AS parent),
    last AS (UPDATE jobq_workflow_steps AS s SET parents_left = 0
        FROM settled WHERE p_outcome = 'done' AND s.workflow_id = p_workflow AND s.name = settled.child
        AND s.parents_left = 1 AND NOT EXISTS (SELECT FROM jobq_workflow_tally AS t
            WHERE t.xact = pg_current_xact_id() AND t.workflow_id = p_workflow AND t.child = s.name)
        RETURNING s.name),
    owed AS (INSERT INTO jobq_workflow_tally (workflow_id, child, settled, failure, opens_round)
        SELECT p_workflow, child, 1, CASE WHEN p_outcome <> 'done'
            THEN format('parent step %s (job %s) ended %s', parent, p_job, p_outcome) END,
            row_number() OVER () = 1
            AND NOT EXISTS (SELECT FROM jobq_workflow_tally WHERE xact = pg_current_xact_id())
        FROM settled WHERE settled.child NOT IN (SELECT name FROM last))
    SELECT array_agg(name) INTO released FROM last;
    IF released IS NOT NULL THEN
        PERFORM jobq_workflow_release(p_workflow, released);
    END IF;
END
$$;

-- At commit (deferred), once per round of a transaction's tally: takes every row of the
-- transaction (jobq_workflow_tally_xact_idx), summed by child (a failure: one of the
-- parents' reasons). Children's step rows locked in (workflow, name) order before any is
-- written; a failure cancels the children whose on_parent_failure is 'cancel' (job rows
-- locked in id order, status rechecked: only a waiting step); the children left with no
-- unfinished parent are released, one statement per workflow.
--
-- A round: the row that a transaction's first settlement inserts while it has no row in
-- the tally opens one (opens_round), and only that row's insert queues the deferred
-- event (the trigger's WHEN): one event a round however many children (a fan-out of
-- 10,000 queues one, not 10,000). A settlement made while the apply runs (a cancel's
-- cascade) finds the tally empty again and opens the next round, fired in the same
-- commit. A row inserted in a subtransaction that rolls back takes its event with it.
CREATE FUNCTION jobq_workflow_tally_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wfs bigint[];
    children text[];
    owed integer[];
    failures text[];
    to_cancel bigint[];
    reasons text[];
    release_wfs bigint[];
    release_names text[];
    released record;
BEGIN
    WITH taken AS (DELETE FROM jobq_workflow_tally AS t WHERE t.xact = pg_current_xact_id()
                   RETURNING t.workflow_id, t.child, t.settled, t.failure),
    by_child AS (SELECT workflow_id, child, sum(settled)::integer AS settled, min(failure) AS failure
                 FROM taken GROUP BY workflow_id, child)
    SELECT array_agg(workflow_id ORDER BY workflow_id, child), array_agg(child ORDER BY workflow_id, child),
           array_agg(settled ORDER BY workflow_id, child), array_agg(failure ORDER BY workflow_id, child)
    INTO wfs, children, owed, failures FROM by_child;
    PERFORM FROM jobq_workflow_steps AS s JOIN unnest(wfs, children) AS t(workflow_id, child)
        ON s.workflow_id = t.workflow_id AND s.name = t.child
    ORDER BY s.workflow_id, s.name FOR UPDATE OF s;
    WITH counted AS (
        UPDATE jobq_workflow_steps AS s SET parents_left = s.parents_left - t.owed
        FROM unnest(wfs, children, owed, failures) AS t(workflow_id, child, owed, failure)
        WHERE s.workflow_id = t.workflow_id AND s.name = t.child
        RETURNING s.workflow_id, s.name, s.job_id, s.parents_left, s.on_parent_failure = 'cancel' AND t.failure IS NOT NULL
                  AS cancelled, t.failure)
    SELECT array_agg(job_id ORDER BY job_id) FILTER (WHERE cancelled),
           array_agg(failure ORDER BY job_id) FILTER (WHERE cancelled),
           array_agg(workflow_id) FILTER (WHERE parents_left = 0 AND NOT cancelled),
           array_agg(name) FILTER (WHERE parents_left = 0 AND NOT cancelled)
    INTO to_cancel, reasons, release_wfs, release_names FROM counted;
    IF to_cancel IS NOT NULL THEN
        WITH target AS (SELECT id FROM jobs WHERE id = ANY(to_cancel) AND status = 'waiting' ORDER BY id FOR UPDATE)
        UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = 'jobq', error = r.reason
        FROM target, unnest(to_cancel, reasons) AS r(id, reason)
        WHERE j.id = target.id AND r.id = target.id AND j.status = 'waiting';
    END IF;
    FOR released IN SELECT r.workflow_id, array_agg(r.name) AS names
                    FROM unnest(release_wfs, release_names) AS r(workflow_id, name)
                    GROUP BY r.workflow_id ORDER BY r.workflow_id LOOP
        PERFORM jobq_workflow_release(released.workflow_id, released.names);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER jobq_workflow_tally_apply AFTER INSERT ON jobq_workflow_tally
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.opens_round) EXECUTE FUNCTION jobq_workflow_tally_apply();

-- As in schema 15 (a step's successful outcome carrying what its handler spawned: the
-- jobs added as steps '<step>.<name>', pending at once, each a new parent of the step's
-- children not yet released), but the children's counts are raised through the tally
-- (settled = minus the number spawned), applied at commit with the step's own edge in
-- the same row: no child's row is locked before the commit, and a child's count never
-- reaches 0 in between (the spawner's own edge is still open until then).
CREATE OR REPLACE FUNCTION jobs_spawn_with_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    parent_name text;
    spawned jsonb := NEW.result->'jobq:spawn';
BEGIN
    NEW.result := NEW.result->'jobq:result';
    SELECT s.name INTO parent_name FROM jobq_workflow_steps AS s WHERE s.job_id = NEW.id;
    IF NOT FOUND OR jsonb_typeof(spawned) <> 'array' THEN
        RETURN NEW;
    END IF;
    WITH items AS MATERIALIZED (
        SELECT parent_name || '.' || (i->>'name') AS name, nextval(pg_get_serial_sequence('jobs', 'id')) AS job_id, i
        FROM jsonb_array_elements(spawned) AS i),
    inserted AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, run_at, tags, workflow_id)
        SELECT job_id, i->>'type', i->>'queue', i->'payload', (i->>'priority')::smallint, (i->>'max_retries')::int,
               coalesce((i->>'run_at')::timestamptz, now()),
               (SELECT array_agg(t) FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(i->'tags') = 'array'
                                                                 THEN i->'tags' END) AS t),
               NEW.workflow_id
        FROM items ORDER BY job_id),
    steps AS (INSERT INTO jobq_workflow_steps (workflow_id, name, job_id, spawned_by)
        SELECT NEW.workflow_id, name, job_id, parent_name FROM items),
    children AS MATERIALIZED (SELECT e.child FROM jobq_workflow_edges AS e
        WHERE e.workflow_id = NEW.workflow_id AND e.parent = parent_name AND e.outcome IS NULL),
    edges AS (INSERT INTO jobq_workflow_edges (workflow_id, parent, child)
        SELECT NEW.workflow_id, items.name, children.child FROM items, children)
    INSERT INTO jobq_workflow_tally (workflow_id, child, settled, opens_round)
    SELECT NEW.workflow_id, child, -(SELECT count(*) FROM items)::integer,
           row_number() OVER () = 1
        AND NOT EXISTS (SELECT FROM jobq_workflow_tally WHERE xact = pg_current_xact_id())
    FROM children;
    RETURN NEW;
END
$$;

-- A release (waiting -> pending) moves each step's row out of jobs_waiting, which fired
-- jobs_left_unfinished for nothing: its first test found the row pending and returned
-- (a fan-out of 10,000 paid 10,000 trigger calls, about a quarter of its release). The
-- release now says so for the length of its statement (the transaction-local setting
-- jobq.releasing), and the trigger's WHEN, whose last test it is, queues no event for
-- a row leaving jobs_waiting meanwhile. The first tests are schema 15's: a job outside
-- any workflow that nobody waits for still stops at them.
CREATE OR REPLACE FUNCTION jobq_workflow_release(p_workflow bigint, p_steps text[]) RETURNS void LANGUAGE sql AS $$
    SELECT set_config('jobq.releasing', 'on', true);
    UPDATE jobs AS j SET status = 'pending', run_at = greatest(j.run_at, now()),
        parent_results = r.results, parent_failures = r.failures
    FROM (SELECT s.job_id, coalesce(a.results, '{}') AS results, a.failures
          FROM jobq_workflow_steps AS s, LATERAL (
              SELECT jsonb_object_agg(e.parent, e.result) FILTER (WHERE e.outcome = 'done') AS results,
                     jsonb_object_agg(e.parent, coalesce(e.error, e.outcome)) FILTER (WHERE e.outcome <> 'done') AS failures
              FROM jobq_workflow_edges AS e WHERE e.workflow_id = s.workflow_id AND e.child = s.name) AS a
          WHERE s.workflow_id = p_workflow AND s.name = ANY(p_steps)) AS r
    WHERE j.id = r.job_id AND j.status = 'waiting';
    SELECT set_config('jobq.releasing', 'off', true);
$$;

DROP TRIGGER jobs_left_unfinished ON jobs;
CREATE TRIGGER jobs_left_unfinished AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status IN ('pending', 'claimed', 'running', 'waiting') AND (OLD.workflow_id IS NOT NULL OR OLD.awaited)
          AND (OLD.status <> 'waiting' OR current_setting('jobq.releasing', true) IS DISTINCT FROM 'on'))
    EXECUTE FUNCTION jobs_left_unfinished();

-- Steps and edges are written once more after their insert (a step's count, an edge's
-- outcome and result): room left on each page lets those updates stay on the page
-- (HOT: no new index entries), for the pages of workflows enqueued from now on.
ALTER TABLE jobq_workflow_steps SET (fillfactor = 70);
ALTER TABLE jobq_workflow_edges SET (fillfactor = 70);
