"""The fragments that the statements of more than one module are made of: the column
lists that ``class_row`` reads (and the claims' list, claimed_columns), the LIVE test of
partition pruning, the keyed insert of jobs that may carry idempotency keys (an
enqueue's and a schedule's), OPEN_QUEUES (the claim's and the idle timer's) and
EACH_PRIORITY (every read of pending jobs per queue through the claim index).

No room runs these directly: the modules of :mod:`jobq.store.sql` build their statements
from them (tests/test_spec.py holds the column lists against the dataclasses). This
module is the bottom of the package: it imports nothing from jobq but :mod:`jobq.spec`.
"""

from __future__ import annotations

from jobq.spec import MAX_PRIORITY, MIN_PRIORITY

# Exactly the fields of jobq.job.Job and of jobq.job.DeadLetter, in order, for
# class_row (tests/test_spec.py holds them together with dataclasses.fields).
JOB_COLUMNS = (
    "id, type, queue, payload, status, priority, attempt, max_retries, run_at, claimed_at, "
    "started_at, heartbeat_at, completed_at, created_at, result, error, errors, worker_id, "
    "lease, idempotency_key, tags, progress, cancelled_by, retried_as, schedule, scheduled_for, snoozes, "
    "unique_while, workflow_id, parent_results, parent_failures, traceparent, handler_finished_at, concurrency_key"
)


def claimed_columns(row: str = "") -> str:
    """JOB_COLUMNS as a claim returns them (jobq.jobs.leases.claimed_job reads them
    back), each after ``row``, the statement's name of the row ("j.", "(c.job)."):
    errors NULL while empty. Only a retry's run has errors; decoding the '[]' of every
    other (PostgreSQL's text of it, then psycopg's JSON loader) was 2.7 µs of the 18.7 a
    job that a claim of 1,000 took, rows read (benchmark/README.md, "The worker's garbage
    collector, and a claim's empty errors")."""
    return ", ".join(f"NULLIF({row}{c}, '[]'::jsonb)" if c == "errors" else row + c
                     for c in (name.strip() for name in JOB_COLUMNS.split(",")))


DEAD_LETTER_COLUMNS = (
    "id, original_id, type, queue, payload, priority, max_retries, error, attempts, errors, "
    "worker_id, died_at, replayed_at, replayed_as, signature, group_id"
)

# LIVE: the status test that makes the planner read jobs_live only (partition pruning);
# every statement that reads or writes jobs that are pending or in flight carries it.
LIVE = "status IN ('pending', 'claimed', 'running')"
# UNFINISHED: the statuses of jobs not finished, the live ones and a workflow's steps
# that wait for their parents (jobs_waiting, migration 0015): what a cancel may end.
UNFINISHED = "('pending', 'claimed', 'running', 'waiting')"

# The inserts of jobs that may carry keys: a row whose key is held for ever by another
# job (job_idempotency_keys) is left out, and ON CONFLICT DO NOTHING leaves out one
# whose key a live job holds (jobs_key_held_idx, the only unique index of jobs_live
# that an insert can meet: ids come from the sequence). Two inserts of one key wait on
# each other at that index, whatever their scopes, so one job takes it. Then the keys
# of the jobs inserted with the scope 'always' are recorded, in the same statement.
# {rows} is a SELECT of the columns of KEYED_INSERT_COLUMNS with the key as
# idempotency_key; {returning}, what the statement returns of the jobs inserted.
KEYED_INSERT_COLUMNS = "type, queue, payload, priority, max_retries, run_at, idempotency_key, tags, unique_while"
KEYED_INSERT = (
    "WITH inserted AS (INSERT INTO jobs ({columns}) "
    "SELECT * FROM ({rows}) AS r WHERE r.idempotency_key IS NULL OR NOT EXISTS "
    "(SELECT FROM job_idempotency_keys AS k WHERE k.idempotency_key = r.idempotency_key) "
    "ON CONFLICT DO NOTHING RETURNING *), "
    "kept AS (INSERT INTO job_idempotency_keys (idempotency_key, job_id) SELECT idempotency_key, id "
    "FROM inserted WHERE idempotency_key IS NOT NULL AND unique_while = 'always') "
    "SELECT {returning} FROM inserted"
)

# OPEN_QUEUES: a CTE fragment (the claim's and the idle timer's): those of
# %(queues)s that are not paused, each checked with one primary-key probe of
# jobq_queues. MATERIALIZED, so that the check runs once per queue before the
# per-queue scans of jobs, never once per candidate row. A claim already under way
# when a pause commits works from its own snapshot: what it took goes back from the
# worker's batch unstarted (jobq.daemon), which hears the pause on jobq_control.
OPEN_QUEUES = (
    "open_queues AS MATERIALIZED (SELECT q.queue FROM unnest(%(queues)b::text[]) AS q(queue) "
    "WHERE NOT EXISTS (SELECT FROM jobq_queues AS p WHERE p.name = q.queue AND p.paused_at IS NOT NULL))"
)

# EACH_PRIORITY: the priorities, to read pending jobs in run_at order through the claim
# index: within one (queue, priority), jobs_pending_claim_idx is in run_at order, so
# the earliest pending job of a queue is the earliest of one probe per priority. (An
# index of pending jobs by (queue, run_at) would answer with one probe, but every new
# job would pay it an entry: 1-2 us of a bulk enqueue's 15, more than all the probes.)
EACH_PRIORITY = f"generate_series({MIN_PRIORITY}, {MAX_PRIORITY}) AS p(priority)"
