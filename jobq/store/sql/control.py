"""An operator's actions on jobs by id: delete a pending job, cancel unfinished ones, run
scheduled ones now, retry dead or cancelled ones; and the reads that say why one
changed nothing.

Run by :mod:`jobq.jobs.control` (:func:`jobq.cancel`, :func:`jobq.delete`,
:func:`jobq.retry`, :func:`jobq.run_now`, which the API, the CLI and the bulk
operations of :mod:`jobq.jobs.operations` call). A handler's own cancel is
:data:`jobq.store.sql.outcomes.JOB_CANCEL_IF_LEASED`.
"""

from __future__ import annotations

from jobq.store.sql.fragments import LIVE, UNFINISHED

# JOB_DELETE_IF_PENDING: delete (jobq.delete, DELETE /jobs/{id}); guarded by status so a
# claimed job is never deleted under its worker (the row lock makes a concurrent claim
# wait, then skip it).
JOB_DELETE_IF_PENDING = "DELETE FROM jobs WHERE id = %(id)s AND status = 'pending' RETURNING id"

# JOB_GET_STATUS: why a delete or a cancel changed nothing (absent, or in which status).
JOB_GET_STATUS = "SELECT status FROM jobs WHERE id = %(id)s"

# JOB_CANCEL_IF_UNFINISHED: pending|claimed|running|waiting -> cancelled for some ids, with
# completed_at, who, and a new lease (a late outcome of the old run is a stale write).
# Rows are locked in id order (primary key) and their status rechecked on the latest
# version, so a cancel racing an outcome leaves exactly one of them. An in-flight job's
# cancel is announced on the jobq_control channel ('cancel <id>'), where the
# maintenance process of every host hears it and stops the run. Returns each changed
# id with its status before.
JOB_CANCEL_IF_UNFINISHED = (
    "WITH target AS (SELECT id, status FROM jobs WHERE id = ANY(%(ids)b::bigint[]) "
    "AND status IN " + UNFINISHED + " ORDER BY id FOR UPDATE), "
    "cancelled AS (UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = %(actor)s, "
    "lease = nextval('jobs_lease_seq') FROM target WHERE j.id = target.id AND j.status IN " + UNFINISHED + " "
    "RETURNING j.id, target.status AS was) "
    "SELECT id, was, CASE WHEN was <> 'pending' THEN pg_notify(jobq_control_channel(), 'cancel ' || id) END FROM cancelled"
)

# JOB_LIST_CANCELLED_RECENTLY_ON_HOST: the jobs cancelled in the last %(seconds)s seconds
# whose last worker ran on %(host)s (worker ids are host:pid:token): after a host's
# control listener reconnects, the cancels whose notification it may have missed. Reads
# the finished partitions by completed_at (jobs_completed_idx, partition pruning on the
# range), no lock.
JOB_LIST_CANCELLED_RECENTLY_ON_HOST = (
    "SELECT id FROM jobs WHERE status = 'cancelled' AND completed_at >= now() - make_interval(secs => %(seconds)s) "
    "AND left(worker_id, length(%(host)s) + 1) = %(host)s || ':' ORDER BY id"
)

# JOB_RUN_NOW_IF_SCHEDULED: pending jobs due in the future become due now, for some ids;
# rows locked in id order (primary key), skipping those another session holds (SKIP
# LOCKED: a claim in flight), status and run_at rechecked on the latest version. The
# jobs' update trigger wakes the workers of their queues. Returns the ids changed.
JOB_RUN_NOW_IF_SCHEDULED = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status = 'pending' "
    "AND run_at > now() ORDER BY id FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs AS j SET run_at = now() FROM target WHERE j.id = target.id AND j." + LIVE + " RETURNING j.id"
)

# JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY: for some ids, a new pending job for each dead or
# cancelled job not retried yet, in one statement. A dead job's new job is the replay of
# its dead letter (its type, queue, payload, priority, retries; the letter records
# replayed_at and replayed_as); a job without a letter (cancelled, or its letter
# discarded) is copied from its row. Tags come from the job. Each new id is taken from
# the identity sequence first (nextval), so that the new job, the letter and the
# original (retried_as) are linked in the same statement. Locks: the jobs in id order
# (primary key), then their letters (dead_letter_jobs_original_id_key), both SKIP
# LOCKED: a job or letter another session holds (a single replay in flight) is left
# alone and not retried, never waited for. Guards: status, retried_as IS NULL, not a
# workflow's step (jobq.retry_workflow retries those, edges and all), and a letter not
# replayed. Returns (original id, new id).
JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY = (
    "WITH j AS MATERIALIZED (SELECT id, type, queue, payload, priority, max_retries, tags FROM jobs "
    "WHERE id = ANY(%(ids)b::bigint[]) AND status IN ('dead', 'cancelled') AND retried_as IS NULL "
    "AND workflow_id IS NULL "
    "ORDER BY id FOR UPDATE SKIP LOCKED), "
    "d AS MATERIALIZED (SELECT id, original_id, type, queue, payload, priority, max_retries FROM dead_letter_jobs "
    "WHERE original_id IN (SELECT id FROM j) AND replayed_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED), "
    "src AS MATERIALIZED (SELECT j.id AS original_id, d.id AS letter_id, "
    "nextval(pg_get_serial_sequence('jobs', 'id')) AS new_id, coalesce(d.type, j.type) AS type, "
    "coalesce(d.queue, j.queue) AS queue, coalesce(d.payload, j.payload) AS payload, "
    "coalesce(d.priority, j.priority) AS priority, coalesce(d.max_retries, j.max_retries) AS max_retries, j.tags "
    "FROM j LEFT JOIN d ON d.original_id = j.id "
    "WHERE d.id IS NOT NULL OR NOT EXISTS (SELECT FROM dead_letter_jobs AS x WHERE x.original_id = j.id)), "
    "created AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, tags) "
    "SELECT new_id, type, queue, payload, priority, max_retries, tags FROM src ORDER BY new_id), "
    "letters AS (UPDATE dead_letter_jobs AS l SET replayed_at = now(), replayed_as = src.new_id "
    "FROM src WHERE l.id = src.letter_id), "
    "originals AS (UPDATE jobs AS o SET retried_as = src.new_id FROM src WHERE o.id = src.original_id) "
    "SELECT original_id, new_id FROM src"
)

# JOB_GET_RETRY_STATE: why a retry changed nothing: the job's status, the job it was
# retried as, its dead letter's replay, and its workflow (jobs_pkey, dead_letter_jobs_original_id_key).
JOB_GET_RETRY_STATE = (
    "SELECT j.status, j.retried_as, d.id IS NOT NULL AND d.replayed_at IS NOT NULL, d.replayed_as, j.workflow_id "
    "FROM jobs AS j LEFT JOIN dead_letter_jobs AS d ON d.original_id = j.id WHERE j.id = %(id)s"
)
