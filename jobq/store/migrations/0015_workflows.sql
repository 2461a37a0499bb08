-- jobq schema 15: workflows. Jobs with edges, the status `waiting`, the release of a step
-- with its last parent's outcome, and the notification of a finished job that someone
-- waits for (jobq.wait).
--
-- The layout, and why:
--   * `waiting` rows get a partition of their own, jobs_waiting. jobs_live's value list
--     cannot be altered, and detaching it to widen it would lock the table; a partition
--     of its own also keeps the claim's and the outcomes' plans exactly as they were
--     (they prune to jobs_live, whose indexes see no waiting row).
--   * The CHECK on status is widened NOT VALID: validating it would read every finished
--     partition, and the partition bounds already admit no other value.
--   * Steps and edges live in tables of their own (jobq_workflow_steps, _edges), keyed by
--     the step's name within its workflow, the step pointing at its current job:
--     retry_workflow re-points a step at its new job and every edge follows.
--   * Three nullable columns on jobs, NULL for every job outside a workflow (so adding
--     them rewrites nothing): workflow_id (the step's workflow), parent_results and
--     parent_failures (copied in at release, so that retention dropping the parents'
--     partition cannot take them away), and awaited (a waiter registered interest).
--
-- Who releases a step: the database, in a row trigger (jobs_left_unfinished) on every
-- row leaving the partition of unfinished jobs it was in. An outcome that moves a job
-- out of jobs_live is a DELETE from jobs_live and an INSERT elsewhere, which fires
-- AFTER DELETE row triggers and no AFTER UPDATE one. The trigger's WHEN tests columns
-- of the old row only, so a job outside a workflow that nobody waits for queues no
-- event and costs the outcome nothing. Because the trigger runs inside the statement
-- that records the parent's outcome, a step is released in the same transaction as
-- that outcome and under its lease (a stale worker's write matches no row, so fires
-- nothing), by any writer: today's workers, the reaper, an operator's cancel, and
-- workers of an older release that know nothing of steps.

ALTER TABLE jobs
    ADD COLUMN workflow_id bigint,
    ADD COLUMN parent_results jsonb,
    ADD COLUMN parent_failures jsonb,
    ADD COLUMN awaited boolean;

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'claimed', 'running', 'done', 'failed', 'dead', 'cancelled', 'waiting')) NOT VALID;

CREATE TABLE jobs_waiting PARTITION OF jobs FOR VALUES IN ('waiting');
ALTER TABLE jobs_waiting ADD CONSTRAINT jobs_waiting_pkey PRIMARY KEY (id);
CREATE INDEX jobs_waiting_created_idx ON jobs_waiting (created_at);
CREATE INDEX jobs_waiting_type_created_idx ON jobs_waiting (type, created_at);

CREATE TABLE jobq_workflows (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        CONSTRAINT jobq_workflows_name_check CHECK (length(name) BETWEEN 1 AND 200),
    idempotency_key text        UNIQUE CONSTRAINT jobq_workflows_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- A step: its name in the workflow, the job that is it now (a retry_workflow re-points
-- it), what its parents' failure does to it, and how many of its parents have not
-- finished yet (decremented under this row's lock: "last" is decided here).
CREATE TABLE jobq_workflow_steps (
    workflow_id       bigint  NOT NULL REFERENCES jobq_workflows ON DELETE CASCADE,
    name              text    NOT NULL CONSTRAINT jobq_workflow_steps_name_check CHECK (length(name) BETWEEN 1 AND 200),
    job_id            bigint  NOT NULL,
    on_parent_failure text    NOT NULL DEFAULT 'cancel'
                      CONSTRAINT jobq_workflow_steps_on_parent_failure_check CHECK (on_parent_failure IN ('cancel', 'run')),
    parents_left      integer NOT NULL DEFAULT 0 CONSTRAINT jobq_workflow_steps_parents_left_check CHECK (parents_left >= 0),
    spawned_by        text,
    PRIMARY KEY (workflow_id, name)
);
CREATE UNIQUE INDEX jobq_workflow_steps_job_idx ON jobq_workflow_steps (job_id);

-- An edge: the child waits for the parent. Settled once, when the parent finishes
-- (outcome: done, dead, cancelled or deleted), with what the child is to read of it.
CREATE TABLE jobq_workflow_edges (
    workflow_id bigint NOT NULL,
    parent      text   NOT NULL,
    child       text   NOT NULL,
    outcome     text,
    result      jsonb,
    error       text,
    PRIMARY KEY (workflow_id, parent, child),
    FOREIGN KEY (workflow_id, parent) REFERENCES jobq_workflow_steps ON DELETE CASCADE,
    FOREIGN KEY (workflow_id, child) REFERENCES jobq_workflow_steps ON DELETE CASCADE
);
CREATE INDEX jobq_workflow_edges_child_idx ON jobq_workflow_edges (workflow_id, child);

-- Steps all of whose parents have finished: waiting -> pending (due now, or at their own
-- run_at if later), each with its parents' results (those that ended done) and failures
-- (the others, under on_parent_failure 'run') copied in from the settled edges, in one
-- statement (a fan-out of 10,000 is one update, one count and one wake-up per queue).
-- The update's status guard makes it a no-op for a step no longer waiting.
CREATE FUNCTION jobq_workflow_release(p_workflow bigint, p_steps text[]) RETURNS void LANGUAGE sql AS $$
    UPDATE jobs AS j SET status = 'pending', run_at = greatest(j.run_at, now()),
        parent_results = r.results, parent_failures = r.failures
    FROM (SELECT s.job_id, coalesce(a.results, '{}') AS results, a.failures
          FROM jobq_workflow_steps AS s, LATERAL (
              SELECT jsonb_object_agg(e.parent, e.result) FILTER (WHERE e.outcome = 'done') AS results,
                     jsonb_object_agg(e.parent, coalesce(e.error, e.outcome)) FILTER (WHERE e.outcome <> 'done') AS failures
              FROM jobq_workflow_edges AS e WHERE e.workflow_id = s.workflow_id AND e.child = s.name) AS a
          WHERE s.workflow_id = p_workflow AND s.name = ANY(p_steps)) AS r
    WHERE j.id = r.job_id AND j.status = 'waiting'
$$;

-- A step's parent finished (p_outcome: done, dead, cancelled, failed or deleted). Its
-- children's step rows are locked first, in name order (two outcomes touching the same
-- children lock them in the same order); then each edge from it is settled once
-- (outcome IS NULL) and each child's count decremented, under that lock: "last" is
-- decided there. A failure cancels the children whose on_parent_failure is 'cancel'
-- (their rows leaving jobs_waiting settle their own edges in turn: the descendants
-- follow); the children whose count reached 0 are released (jobq_workflow_release).
-- Set-based: a fan-out's release costs a few statements, not a few per child.
CREATE FUNCTION jobq_workflow_settle(p_workflow bigint, p_job bigint, p_outcome text, p_result jsonb, p_error text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    parent_name text;
    to_cancel bigint[];
    to_release text[];
BEGIN
    SELECT s.name INTO parent_name FROM jobq_workflow_steps AS s WHERE s.job_id = p_job AND s.workflow_id = p_workflow;
    IF NOT FOUND THEN
        RETURN;  -- a step's former job (replaced by retry_workflow)
    END IF;
    PERFORM FROM jobq_workflow_steps AS s
    WHERE s.workflow_id = p_workflow AND s.name IN (SELECT e.child FROM jobq_workflow_edges AS e
        WHERE e.workflow_id = p_workflow AND e.parent = parent_name AND e.outcome IS NULL)
    ORDER BY s.name FOR UPDATE;
    WITH settled AS (
        UPDATE jobq_workflow_edges AS e SET outcome = p_outcome, result = p_result, error = p_error
        WHERE e.workflow_id = p_workflow AND e.parent = parent_name AND e.outcome IS NULL RETURNING e.child),
    counted AS (
        UPDATE jobq_workflow_steps AS s SET parents_left = s.parents_left - 1
        FROM settled WHERE s.workflow_id = p_workflow AND s.name = settled.child
        RETURNING s.name, s.job_id, s.parents_left, s.on_parent_failure)
    SELECT array_agg(job_id) FILTER (WHERE p_outcome <> 'done' AND on_parent_failure = 'cancel'),
           array_agg(name) FILTER (WHERE parents_left = 0 AND NOT (p_outcome <> 'done' AND on_parent_failure = 'cancel'))
    INTO to_cancel, to_release FROM counted;
    IF to_cancel IS NOT NULL THEN
        UPDATE jobs SET status = 'cancelled', completed_at = now(), cancelled_by = 'jobq',
            error = format('parent step %s (job %s) ended %s', parent_name, p_job, p_outcome)
        WHERE id = ANY(to_cancel) AND status = 'waiting';
    END IF;
    IF to_release IS NOT NULL THEN
        PERFORM jobq_workflow_release(p_workflow, to_release);
    END IF;
END
$$;

-- A row left the partition of unfinished jobs it was in (jobs_live or jobs_waiting):
-- moved by an update (the row is found again, in its new partition) or deleted (it is
-- not). A finished job's outcome was written in this transaction, with completed_at =
-- now(), so the first read prunes to one finished partition. A move between
-- unfinished partitions (a release: waiting -> pending) is nothing to settle.
CREATE FUNCTION jobs_left_unfinished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_status text;
    now_result jsonb;
    now_error text;
BEGIN
    IF OLD.status = 'waiting' AND EXISTS (SELECT FROM jobs WHERE id = OLD.id AND status = 'pending') THEN
        RETURN NULL;  -- released (jobs_live's primary key: the one probe a release pays)
    END IF;
    SELECT status, result, error INTO now_status, now_result, now_error FROM jobs
    WHERE id = OLD.id AND status IN ('done', 'failed', 'dead', 'cancelled') AND completed_at = now();
    IF NOT FOUND THEN
        SELECT status, result, error INTO now_status, now_result, now_error FROM jobs WHERE id = OLD.id;
        IF NOT FOUND THEN
            now_status := 'deleted';
            now_error := 'deleted';
        ELSIF now_status NOT IN ('done', 'failed', 'dead', 'cancelled') THEN
            RETURN NULL;
        END IF;
    END IF;
    IF OLD.awaited THEN
        PERFORM pg_notify('jobq_finished', OLD.id::text);
    END IF;
    IF OLD.workflow_id IS NOT NULL THEN
        PERFORM jobq_workflow_settle(OLD.workflow_id, OLD.id, now_status, now_result, now_error);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_left_unfinished AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.status IN ('pending', 'claimed', 'running', 'waiting') AND (OLD.workflow_id IS NOT NULL OR OLD.awaited))
    EXECUTE FUNCTION jobs_left_unfinished();

-- A step's successful outcome that carries what its handler spawned (jobq.spawn): the
-- worker sends the result as {"jobq:spawn": [jobs], "jobq:result": value}; before the
-- row is written, this stores the value alone and adds the jobs to the step's workflow
-- as steps named '<step>.<name>', pending at once, each a new parent of the step's
-- children not yet released (so they wait for everything the step spawned as well).
-- It runs inside the outcome statement, under its lease: a run that fails, times out or
-- is lost spawns nothing, and a run's spawns are written once, with its outcome.
CREATE FUNCTION jobs_spawn_with_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
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
    UPDATE jobq_workflow_steps AS s SET parents_left = s.parents_left + (SELECT count(*) FROM items)
    WHERE s.workflow_id = NEW.workflow_id AND s.name IN (SELECT child FROM children);
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_spawn_with_outcome BEFORE UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status = 'done' AND OLD.workflow_id IS NOT NULL AND jsonb_typeof(NEW.result) = 'object'
          AND NEW.result ? 'jobq:spawn')
    EXECUTE FUNCTION jobs_spawn_with_outcome();
