"""The fenced outcomes of a worker's jobs, a batch per statement: done; failed (back to
pending for a retry, or dead with its dead letter written by the same statement);
released; cancelled by its handler; snoozed. Each is guarded by lease and status (the
write of a stale lease matches nothing, and says so) and lets go of the jobs' advisory
locks in the same statement. And, after a connection broke mid-commit, which outcomes
were in fact recorded.

Run by :mod:`jobq.jobs.leases`, for the worker (:mod:`jobq.daemon.worker`) and for the
reaper that settles a gone worker's jobs (:mod:`jobq.daemon.maintenance.reaper`).
"""

from __future__ import annotations

from jobq.store.sql.leases import BY_IDS, BY_ID_IN_FLIGHT

# JOB_COMPLETE_IF_LEASED: claimed|running -> done, guarded by lease and status, for a
# batch of outcomes; releases the advisory locks of the batch in the same statement.
# Returns each id with whether its write was recorded (false: a stale lease).
JOB_COMPLETE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(results)b::jsonb[], "
    "%(elapsed)b::float8[], %(locked)b::bool[]) AS o(id, lease, result, elapsed, locked)), "
    "done AS (UPDATE jobs AS j SET status = 'done', result = o.result, error = NULL, "
    "completed_at = now(), heartbeat_at = now(), "
    "started_at = coalesce(j.started_at, now() - make_interval(secs => o.elapsed)) "
    "FROM o WHERE " + BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, done.id IS NOT NULL, "
    "CASE WHEN o.locked THEN pg_advisory_unlock(%(lock_base)s | o.id) END "
    "FROM o LEFT JOIN done ON done.id = o.id"
)


# The unlock of an outcome statement that may send a job back to pending: only once
# every row of ``cte`` is written (the uncorrelated count runs the update to its end
# before the first unlock). Such an update can fail on jobs_key_held_idx (a job whose
# key was taken while it ran, by an inserter that had not committed yet, see migration
# 0008): then no lock has been let go, and the writer can simply try again.
def _unlock_after(cte: str) -> str:
    return (
        f"CASE WHEN o.locked AND (SELECT count(*) FROM {cte}) >= 0 "
        "THEN pg_advisory_unlock(%(lock_base)s | o.id) END"
    )


# The failures a job's row recorded after its dead letter was written: a dead job put
# back to pending by hand (SQL) that dies again adds them to its dead letter.
_FAILURES_SINCE_DEATH = (
    "coalesce((SELECT jsonb_agg(e) FROM jsonb_array_elements(excluded.errors) AS e "
    "WHERE (e->>'at')::timestamptz > d.died_at), '[]'::jsonb)"
)

# JOB_FAIL_IF_LEASED: claimed|running -> pending (attempt + 1, run_at pushed by the
# given delay) while attempt < max_retries, else -> dead with its copy inserted into
# dead_letter_jobs by the same statement (unique on original_id: never twice; a job that
# dies again after an operator re-queued it by hand updates its dead letter). Guarded
# by lease and status; releases the advisory locks of the batch. ``max_retries`` entries
# that are not NULL override the row's (a handler's own limit). A run traced by
# OpenTelemetry (jobq.observe.tracing) adds its span's traceparent to its errors entry
# ('span'): a retry's span links to its first attempt's.
JOB_FAIL_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(errors)b::text[], "
    "%(delays)b::float8[], %(max_retries)b::int[], %(elapsed)b::float8[], %(locked)b::bool[], %(spans)b::text[]) "
    "AS o(id, lease, error, delay, max_retries, elapsed, locked, span)), "
    "failed AS (UPDATE jobs AS j SET "
    "status = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN 'pending' ELSE 'dead' END, "
    "attempt = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN j.attempt + 1 ELSE j.attempt END, "
    "run_at = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) "
    "THEN now() + make_interval(secs => o.delay) ELSE j.run_at END, "
    "completed_at = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN NULL ELSE now() END, "
    "error = o.error, heartbeat_at = now(), "
    "started_at = coalesce(j.started_at, now() - make_interval(secs => o.elapsed)), "
    "errors = j.errors || jsonb_build_array(jsonb_build_object("
    "'attempt', j.attempt, 'error', o.error, 'worker_id', j.worker_id, 'at', now()) "
    "|| CASE WHEN o.span IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('span', o.span) END) "
    "FROM o WHERE " + BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id, j.type, j.queue, j.payload, j.priority, j.max_retries, j.error, j.attempt, "
    "j.errors, j.worker_id, j.status, j.run_at), "
    "dead AS (INSERT INTO dead_letter_jobs AS d (original_id, type, queue, payload, priority, max_retries, "
    "error, attempts, errors, worker_id) "
    "SELECT id, type, queue, payload, priority, max_retries, error, attempt + 1, errors, worker_id "
    "FROM failed WHERE status = 'dead' "
    "ON CONFLICT (original_id) DO UPDATE SET error = excluded.error, worker_id = excluded.worker_id, "
    "died_at = now(), attempts = d.attempts + jsonb_array_length(" + _FAILURES_SINCE_DEATH + "), "
    "errors = d.errors || " + _FAILURES_SINCE_DEATH + " "
    "RETURNING original_id) "
    "SELECT o.id, failed.status, failed.attempt, failed.run_at, " + _unlock_after("failed") + " "
    "FROM o LEFT JOIN failed ON failed.id = o.id"
)

# JOB_RELEASE_IF_LEASED: claimed|running -> pending with no attempt counted (a claimed
# job the worker gives back, a running job returned at shutdown), guarded by lease
# and status; releases the advisory locks of the batch.
JOB_RELEASE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(locked)b::bool[]) "
    "AS o(id, lease, locked)), "
    "released AS (UPDATE jobs AS j SET status = 'pending', started_at = NULL "
    "FROM o WHERE " + BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, released.id IS NOT NULL, " + _unlock_after("released") + " "
    "FROM o LEFT JOIN released ON released.id = o.id"
)

# JOB_NOTE_FINISHED_IF_CANCELLED: a success whose write was refused because an operator's
# cancel committed first (the outcome waited in the worker's buffer): the cancelled row
# keeps the handler's result and when it finished (the database's now() less how long
# ago). Guarded by status, by the worker that ran it and by handler_finished_at still
# NULL (once); the row is in a finished partition (primary key). Returns the ids noted.
JOB_NOTE_FINISHED_IF_CANCELLED = (
    "UPDATE jobs AS j SET result = o.result, handler_finished_at = now() - make_interval(secs => o.ago) "
    "FROM unnest(%(ids)b::bigint[], %(results)b::jsonb[], %(ago)b::float8[]) AS o(id, result, ago) "
    "WHERE j.id = o.id AND j.status = 'cancelled' AND j.worker_id = %(worker_id)s "
    "AND j.handler_finished_at IS NULL RETURNING j.id"
)

# JOB_CANCEL_IF_LEASED: claimed|running -> cancelled, by the worker whose handler ended
# cancelled (it raised jobq.Cancelled); guarded by lease and status, so that a job
# already cancelled by an operator (whose cancel replaced the lease) is left as it is.
# Releases the advisory locks of the batch either way.
JOB_CANCEL_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(locked)b::bool[]) "
    "AS o(id, lease, locked)), "
    "cancelled AS (UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = %(actor)s "
    "FROM o WHERE " + BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, cancelled.id IS NOT NULL, "
    "CASE WHEN o.locked THEN pg_advisory_unlock(%(lock_base)s | o.id) END "
    "FROM o LEFT JOIN cancelled ON cancelled.id = o.id"
)

# JOB_SNOOZE_IF_LEASED: claimed|running -> pending with run_at pushed by each job's
# delay, snoozes + 1, no attempt counted (a handler raised jobq.Snooze); guarded by
# lease and status; releases the advisory locks of the batch. Returns each id with
# whether its write was recorded (false: a stale lease).
JOB_SNOOZE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(delays)b::float8[], "
    "%(locked)b::bool[]) AS o(id, lease, delay, locked)), "
    "snoozed AS (UPDATE jobs AS j SET status = 'pending', run_at = now() + make_interval(secs => o.delay), "
    "snoozes = j.snoozes + 1, started_at = NULL, heartbeat_at = now() "
    "FROM o WHERE " + BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, snoozed.id IS NOT NULL, " + _unlock_after("snoozed") + " "
    "FROM o LEFT JOIN snoozed ON snoozed.id = o.id"
)

# JOB_GET_FINISHED_UNDER_LEASE: of some (id, lease) pairs, the jobs whose row still
# carries that lease but is no longer in flight: after a connection broke mid-commit,
# an outcome that was in fact recorded (not a stale write).
JOB_GET_FINISHED_UNDER_LEASE = (
    "SELECT j.id FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[]) AS s(id, lease) "
    "JOIN jobs AS j ON j.id = s.id AND j.lease = s.lease AND j.status NOT IN ('claimed', 'running')"
)
