"""Workflows: their submission (the workflow, its steps' jobs, the steps and the edges, in
one statement), the reads of a run, the list, and the operator's cancel and retry of a
whole workflow; and a waiter's registration of interest in a job's end.

The release of a step is not here: it is the database's, in the statement-level
triggers of migration 0022 (``jobs_finished_after_update`` / ``_after_delete`` ->
``jobq_workflow_finished`` -> ``jobq_workflow_release``), fired at the end of whatever
statement moves parents out of the unfinished partitions (marked by the row trigger
``jobs_leaving_unfinished``), inside that statement's transaction; a child that is not
released there (it has other parents, or is cancelled) is counted at that transaction's
commit (migration 0021's ``jobq_workflow_tally`` and its deferred trigger).

Run by :mod:`jobq.workflows` (submission, runs, operations, waiting).
"""

from __future__ import annotations

from jobq.store.sql.fragments import JOB_COLUMNS, UNFINISHED

# WORKFLOW_INSERT: a workflow with all its steps. The workflow row first (a held
# idempotency_key, UNIQUE, inserts nothing, and then nothing else is: the caller reads
# the run that holds it); each step's job id from the jobs sequence, so that the jobs,
# the steps and the edges are linked in the same statement; jobs with parents are
# 'waiting' (jobs_waiting), the others 'pending' (the insert trigger wakes their
# queues). Edges reference steps by name (the foreign keys are checked at the end of
# the statement, when the steps are in). Returns each step's name with its job.
WORKFLOW_INSERT = (
    "WITH wf AS (INSERT INTO jobq_workflows (name, idempotency_key) VALUES (%(name)s, %(key)s) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id), "
    "s AS MATERIALIZED (SELECT wf.id AS workflow_id, nextval(pg_get_serial_sequence('jobs', 'id')) AS job_id, s.* "
    "FROM wf, unnest(%(names)b::text[], %(types)b::text[], %(queues)b::text[], %(payloads)b::jsonb[], "
    "%(priorities)b::smallint[], %(max_retries)b::int[], %(run_ats)b::timestamptz[], %(tags)b::text[], "
    "%(parents_left)b::int[], %(on_parent_failure)b::text[], %(concurrency_keys)b::text[]) "
    "AS s(name, type, queue, payload, priority, max_retries, run_at, tags, parents_left, on_parent_failure, "
    "concurrency_key)), "
    "steps AS (INSERT INTO jobq_workflow_steps (workflow_id, name, job_id, on_parent_failure, parents_left) "
    "SELECT workflow_id, name, job_id, on_parent_failure, parents_left FROM s), "
    "edges AS (INSERT INTO jobq_workflow_edges (workflow_id, parent, child) "
    "SELECT wf.id, e.parent, e.child FROM wf, unnest(%(parents)b::text[], %(children)b::text[]) AS e(parent, child)), "
    "inserted AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, run_at, tags, status, workflow_id, "
    "concurrency_key) SELECT job_id, type, queue, payload, priority, max_retries, coalesce(run_at, now()), tags::text[], "
    "CASE WHEN parents_left > 0 THEN 'waiting' ELSE 'pending' END, workflow_id, concurrency_key FROM s ORDER BY job_id "
    "RETURNING " + JOB_COLUMNS + ") "
    "SELECT s.name, inserted.* FROM inserted JOIN s ON s.job_id = inserted.id"
)

# WORKFLOW_GET_BY_KEY: the workflow holding an idempotency key (its UNIQUE index).
WORKFLOW_GET_BY_KEY = "SELECT id FROM jobq_workflows WHERE idempotency_key = %(key)s"

# WORKFLOW_GET: one workflow (primary key).
WORKFLOW_GET = "SELECT id, name, idempotency_key, created_at FROM jobq_workflows WHERE id = %(id)s"

# WORKFLOW_GET_STEPS: a workflow's steps in name order (its primary key), each with its
# current job's id; the jobs are read apart, by their ids (JOB_GET_BY_IDS: one probe of
# each partition's id index for all of them). Joined here, a job read a step at a time
# was read by whatever the planner chose for jobs_waiting: believed empty (analysed
# when no workflow waited), a whole scan of its id index for each step.
WORKFLOW_GET_STEPS = (
    "SELECT name, on_parent_failure, parents_left, spawned_by, job_id FROM jobq_workflow_steps "
    "WHERE workflow_id = %(id)s ORDER BY name"
)

# WORKFLOW_GET_EDGES: a workflow's edges (parent, child, outcome once settled), by its
# primary key.
WORKFLOW_GET_EDGES = (
    "SELECT parent, child, outcome FROM jobq_workflow_edges WHERE workflow_id = %(id)s ORDER BY parent, child"
)

# WORKFLOW_GET_STEP_OF_JOB: the step a job is (jobq_workflow_steps_job_idx), with its
# parents' names, jobs and statuses (the edges' child index, then the parents' steps).
WORKFLOW_GET_STEP_OF_JOB = (
    "SELECT s.workflow_id, s.name, p.name, p.job_id, (SELECT status FROM jobs WHERE id = p.job_id) "
    "FROM jobq_workflow_steps AS s LEFT JOIN jobq_workflow_edges AS e ON e.workflow_id = s.workflow_id "
    "AND e.child = s.name LEFT JOIN jobq_workflow_steps AS p ON p.workflow_id = e.workflow_id AND p.name = e.parent "
    "WHERE s.job_id = %(id)s ORDER BY p.name"
)

# The status of a workflow from its steps' jobs: running while any is unfinished; then
# done if all are, dead if any is, else cancelled. A job gone (retention) counts as done.
_STATUS = (
    "CASE WHEN count(*) FILTER (WHERE j.status IN " + UNFINISHED + ") > 0 THEN 'running' "
    "WHEN count(*) FILTER (WHERE j.status = 'dead') > 0 THEN 'dead' "
    "WHEN count(*) FILTER (WHERE j.status = 'cancelled') > 0 THEN 'cancelled' ELSE 'done' END"
)

# WORKFLOW_LIST: workflows newest first, below a keyset cursor (id), optionally of one
# status; each with its step count and status (its steps' jobs read per workflow: a
# page costs its workflows' steps).
WORKFLOW_LIST = (
    "SELECT * FROM (SELECT w.id, w.name, w.created_at, count(s.name) AS steps, " + _STATUS + " AS status, "
    "count(*) FILTER (WHERE j.status = 'done') AS done "
    "FROM jobq_workflows AS w JOIN jobq_workflow_steps AS s ON s.workflow_id = w.id "
    "LEFT JOIN LATERAL (SELECT status FROM jobs WHERE id = s.job_id) AS j ON true "
    "WHERE w.id < %(before)s AND w.id IN (SELECT id FROM jobq_workflows WHERE id < %(before)s "
    "ORDER BY id DESC LIMIT %(scan)s) GROUP BY w.id) AS listed "
    "WHERE %(status)s::text IS NULL OR status = %(status)s ORDER BY id DESC LIMIT %(limit)s"
)

# WORKFLOW_STATUS: one workflow's status, as WORKFLOW_LIST computes it, from its steps'
# jobs read by their ids (WORKFLOW_GET_STEPS says why).
WORKFLOW_STATUS = "SELECT " + _STATUS + " FROM jobs AS j WHERE j.id = ANY(%(ids)b::bigint[])"

# WORKFLOW_CANCEL_WAITING: a workflow's waiting steps -> cancelled, first, so that no
# step is released while its parents are being cancelled (each cancelled step's row
# leaving jobs_waiting settles its edges). The rows are locked in id order; the status
# is rechecked on the latest version. Returns the ids changed. The jobs are read by id
# (`= ANY` of the steps' job ids, then of the locked ones), not joined with the steps or
# the locked set: a join the planner orders from its guesses can compare every pair.
# (A cancel of 4,000 waiting steps once took 8.6 s in a CI run against 80 ms: most
# likely the settlement of the cancelled steps' edges reading every edge of the workflow
# for each step through the child index, reproduced and made impossible by schema 35.)
WORKFLOW_CANCEL_WAITING = (
    "WITH target AS (SELECT id FROM jobs WHERE status = 'waiting' AND id = ANY(ARRAY("
    "SELECT job_id FROM jobq_workflow_steps WHERE workflow_id = %(id)s)) ORDER BY id FOR UPDATE) "
    "UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = %(actor)s, "
    "error = 'workflow cancelled' WHERE j.id = ANY(ARRAY(SELECT id FROM target)) AND j.status = 'waiting' "
    "RETURNING j.id"
)

# WORKFLOW_GET_JOB_IDS: the current jobs of a workflow's steps (its primary key).
WORKFLOW_GET_JOB_IDS = "SELECT job_id FROM jobq_workflow_steps WHERE workflow_id = %(id)s ORDER BY job_id"

# WORKFLOW_RETRY: new jobs for a workflow's steps whose job ended dead or cancelled
# (not retried yet), the steps locked first (FOR UPDATE, in name order). Their edges
# are re-opened where the parent is retried too or the child still waits; each retried
# step waits for its open edges ('waiting', released below if none), a waiting child
# outside the retry for the parents it gets back. The old jobs keep their rows and
# point at the new ones (retried_as). Returns (step, old job, new job).
# No join of the steps, the jobs and the retried steps for the planner to order from
# its guesses of their sizes: believed one row a side, a join read one side whole for
# each row of the other (a retry of 2,000 steps compared 6,000,000 pairs of names, 1 s;
# later 4,006,002 pairs of ids, the steps with their jobs). The jobs are read by id
# (ended: the workflow's steps' job ids, `= ANY`), and each set the next part needs is
# one JSON object built once and looked up by key (``?``, ``->>``: a binary search):
# the ended jobs' ids, the retried steps' names, old job -> new job.
WORKFLOW_RETRY = (
    "WITH ended AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(j.id::text, true), '{}') AS ids FROM jobs AS j "
    "WHERE j.id = ANY(ARRAY(SELECT s.job_id FROM jobq_workflow_steps AS s WHERE s.workflow_id = %(id)s)) "
    "AND j.status IN ('dead', 'cancelled') AND j.retried_as IS NULL), "
    "r AS MATERIALIZED (SELECT s.name, s.job_id AS old_id, nextval(pg_get_serial_sequence('jobs', 'id')) AS new_id "
    "FROM jobq_workflow_steps AS s WHERE s.workflow_id = %(id)s AND (SELECT ids FROM ended) ? s.job_id::text "
    "ORDER BY s.name FOR UPDATE), "
    "sets AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(name, true), '{}') AS names, "
    "coalesce(jsonb_object_agg(old_id::text, new_id), '{}') AS new_ids FROM r), "
    "reopened AS (UPDATE jobq_workflow_edges AS e SET outcome = NULL, result = NULL, error = NULL "
    "WHERE e.workflow_id = %(id)s AND e.outcome IS NOT NULL AND (SELECT names FROM sets) ? e.parent "
    "AND ((SELECT names FROM sets) ? e.child OR EXISTS (SELECT FROM jobq_workflow_steps AS c JOIN jobs AS cj "
    "ON cj.id = c.job_id WHERE c.workflow_id = e.workflow_id AND c.name = e.child AND cj.status = 'waiting')) "
    "RETURNING e.parent, e.child), "
    "created AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, tags, status, workflow_id, "
    "concurrency_key) SELECT ((SELECT new_ids FROM sets) ->> j.id::text)::bigint, j.type, j.queue, j.payload, "
    "j.priority, j.max_retries, j.tags, 'waiting', j.workflow_id, j.concurrency_key "
    "FROM jobs AS j WHERE j.id = ANY(ARRAY(SELECT old_id FROM r)) AND j.status IN ('dead', 'cancelled') "
    "ORDER BY 1), "
    "originals AS (UPDATE jobs AS o SET retried_as = ((SELECT new_ids FROM sets) ->> o.id::text)::bigint "
    "WHERE o.id = ANY(ARRAY(SELECT old_id FROM r)) AND o.status IN ('dead', 'cancelled')) "
    "SELECT name, old_id, new_id FROM r"
)

# WORKFLOW_RECOUNT_PARENTS: after a retry (WORKFLOW_RETRY), the steps' count of
# parents not finished, from their open edges; returns the steps with none left,
# which the caller releases (jobq_workflow_release). The retried steps (name -> new
# job) are one JSON object, looked up by key, as in WORKFLOW_RETRY: each step of the
# workflow once, and each of its edges by the child index.
WORKFLOW_RECOUNT_PARENTS = (
    "WITH retried AS MATERIALIZED (SELECT jsonb_object_agg(r.name, r.new_id) AS new_ids "
    "FROM unnest(%(names)b::text[], %(new_ids)b::bigint[]) AS r(name, new_id)) "
    "UPDATE jobq_workflow_steps AS s SET "
    "job_id = coalesce(((SELECT new_ids FROM retried) ->> s.name)::bigint, s.job_id), "
    "parents_left = (SELECT count(*) FROM jobq_workflow_edges AS e WHERE e.workflow_id = s.workflow_id "
    "AND e.child = s.name AND e.outcome IS NULL) "
    "WHERE s.workflow_id = %(id)s AND ((SELECT new_ids FROM retried) ? s.name OR EXISTS (SELECT FROM "
    "jobq_workflow_edges AS p WHERE p.workflow_id = s.workflow_id AND p.child = s.name "
    "AND (SELECT new_ids FROM retried) ? p.parent)) "
    "RETURNING s.name, s.parents_left"
)

# WORKFLOW_RELEASE: release those of some steps that are waiting (jobq_workflow_release).
WORKFLOW_RELEASE = "SELECT jobq_workflow_release(%(id)s, %(names)b::text[])"

# WORKFLOW_DELETE_WITHOUT_JOBS: retention (jobq.store.retention) of workflows older than
# the jobs' retention none of whose steps' jobs is left (each step's job looked up by
# id: one probe per partition's id index); up to {batch} a statement, oldest first
# (primary key). Their steps and edges go with them (ON DELETE CASCADE).
WORKFLOW_DELETE_WITHOUT_JOBS = (
    "DELETE FROM jobq_workflows WHERE id IN (SELECT w.id FROM jobq_workflows AS w "
    "WHERE w.created_at < now() - make_interval(secs => %(older_than)s) AND NOT EXISTS "
    "(SELECT FROM jobq_workflow_steps AS s JOIN jobs AS j ON j.id = s.job_id WHERE s.workflow_id = w.id) "
    "ORDER BY w.id LIMIT %(batch)s)"
)

# JOB_AWAIT_IF_UNFINISHED: a waiter's interest in some jobs' end: the trigger
# jobs_finished_after_update (or _after_delete) notifies 'jobq_finished' with the id when such a job finishes
# (or is deleted). Primary-key probes; returns each id unfinished at the statement's
# snapshot with whether it is now marked. A row another transaction holds (a worker
# writing its outcome, a claim) is skipped, not waited for (SKIP LOCKED): the mark never
# waits on a row lock, so it cannot deadlock with an outcome statement, which locks its
# batch in claim order while a mark of many rows would lock them in its scan's order
# (such a deadlock once killed the outcome write of a test's finisher).
JOB_AWAIT_IF_UNFINISHED = (
    "WITH unfinished AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status IN " + UNFINISHED + "), "
    "marked AS (UPDATE jobs SET awaited = true WHERE id IN (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) "
    "AND status IN " + UNFINISHED + " FOR UPDATE SKIP LOCKED) AND status IN " + UNFINISHED + " RETURNING id) "
    "SELECT u.id, m.id IS NOT NULL FROM unfinished AS u LEFT JOIN marked AS m ON m.id = u.id"
)

# FINISHED_CHANNEL: where the trigger announces the end of an awaited job.
FINISHED_CHANNEL = "jobq_finished"
LISTEN_FINISHED = "LISTEN " + FINISHED_CHANNEL
