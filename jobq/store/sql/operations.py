"""Bulk operations (jobq_operations: one row per operation, advanced a chunk at a time
under its runner's advisory lock) and their chunks: the ids of the next chunk after the
cursor, and the bulk writes of jobs (delete, set priority) a chunk at a time. A dead-letter
group's chunks are replayed and discarded by :mod:`jobq.store.sql.dead_letters`; a bulk
cancel, retry or run-now by :mod:`jobq.store.sql.control`, by id.

Run by :mod:`jobq.jobs.operations` (started from the API and the CLI).
"""

from __future__ import annotations

from jobq.store.sql.fragments import LIVE

# OPERATION_COLUMNS: exactly the fields of jobq.jobs.operations.Operation, in order, for
# class_row.
OPERATION_COLUMNS = (
    "id, action, target, params, actor, state, matched, changed, skipped, cursor, error, "
    "created_at, heartbeat_at, finished_at"
)

# OPERATION_INSERT: a bulk operation, recorded running before its first change.
OPERATION_INSERT = (
    "INSERT INTO jobq_operations (action, target, params, actor) "
    "VALUES (%(action)s, %(target)s::jsonb, %(params)s::jsonb, %(actor)s) RETURNING " + OPERATION_COLUMNS
)

# OPERATION_GET: one operation by primary key, no lock.
OPERATION_GET = "SELECT " + OPERATION_COLUMNS + " FROM jobq_operations WHERE id = %(id)s"

# OPERATION_LIST_RUNNING: the ids of running operations (jobq_operations_running_idx),
# oldest first; whether their runner is gone is then asked of their advisory locks.
OPERATION_LIST_RUNNING = "SELECT id FROM jobq_operations WHERE state = 'running' ORDER BY id"

# OPERATION_TRY_LOCK / OPERATION_LOCK / OPERATION_UNLOCK: the session advisory lock of
# one operation's runner, a two-integer key (jobq.store.locks.operation_key), a key space
# apart from the jobs' bigint keys. Touch no table.
OPERATION_TRY_LOCK = "SELECT pg_try_advisory_lock(%(high)s, %(low)s)"
OPERATION_LOCK = "SELECT pg_advisory_lock(%(high)s, %(low)s)"
OPERATION_UNLOCK = "SELECT pg_advisory_unlock(%(high)s, %(low)s)"

# OPERATION_ADVANCE_IF_AT_CURSOR: one chunk done, in the chunk's own transaction: the
# cursor moves past it and the counts grow. Guarded by state and by the cursor the
# chunk started from (primary key; the row lock orders two runners, the advisory lock
# keeps there from being two). Returns the row, or nothing if the guard failed.
OPERATION_ADVANCE_IF_AT_CURSOR = (
    "UPDATE jobq_operations SET cursor = %(next)s, matched = matched + %(matched)s, "
    "changed = changed + %(changed)s, skipped = skipped + %(skipped)s, heartbeat_at = now() "
    "WHERE id = %(id)s AND state = 'running' AND cursor = %(cursor)s RETURNING " + OPERATION_COLUMNS
)

# OPERATION_FINISH_IF_RUNNING: running -> done | failed (with the error), guarded by state.
OPERATION_FINISH_IF_RUNNING = (
    "UPDATE jobq_operations SET state = %(state)s, error = %(error)s, finished_at = now(), heartbeat_at = now() "
    "WHERE id = %(id)s AND state = 'running' RETURNING " + OPERATION_COLUMNS
)

# JOB_GET_LAST_ID / DEAD_LETTER_GET_LAST_ID: the newest id (the primary key's last
# entry): an operation acts on the rows that existed when it started, up to this id.
JOB_GET_LAST_ID = "SELECT coalesce(max(id), 0) FROM jobs"
DEAD_LETTER_GET_LAST_ID = "SELECT coalesce(max(id), 0) FROM dead_letter_jobs"

# JOB_CHUNK_SELECT / JOB_CHUNK_ORDER: the ids of the next chunk of a filter's jobs
# after the cursor and up to the operation's last id, in id order (a forward walk of
# jobs_pkey, or the filter's index and a sort), no lock; jobq.jobs.operations puts the
# filter's clauses (JOB_LIST_FILTERS) between.
JOB_CHUNK_SELECT = "SELECT id FROM jobs WHERE id > %(cursor)s AND id <= %(last_id)s"
JOB_CHUNK_ORDER = " ORDER BY id LIMIT %(chunk)s"

# DEAD_LETTER_CHUNK_OF_GROUP: the ids of the next chunk of a group's letters not
# replayed after the cursor and up to the operation's last id, in id order
# (dead_letter_jobs_group_waiting_idx), no lock.
DEAD_LETTER_CHUNK_OF_GROUP = (
    "SELECT id FROM dead_letter_jobs WHERE group_id = %(group_id)s AND replayed_at IS NULL "
    "AND id > %(cursor)s AND id <= %(last_id)s ORDER BY id LIMIT %(chunk)s"
)

# JOB_DELETE_IF_NOT_IN_FLIGHT: bulk delete; pending or finished jobs of some ids, never
# claimed or running ones. Rows locked in id order (primary key), skipping those
# another session holds (SKIP LOCKED), status rechecked on the latest version.
JOB_DELETE_IF_NOT_IN_FLIGHT = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status NOT IN ('claimed', 'running') "
    "ORDER BY id FOR UPDATE SKIP LOCKED) "
    "DELETE FROM jobs AS j USING target WHERE j.id = target.id RETURNING j.id"
)

# JOB_SET_PRIORITY_IF_PENDING: bulk priority change of pending jobs of some ids (the
# only ones whose priority still matters), those already at it left alone; same locks.
JOB_SET_PRIORITY_IF_PENDING = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status = 'pending' "
    "AND priority <> %(priority)s ORDER BY id FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs AS j SET priority = %(priority)s FROM target WHERE j.id = target.id AND j." + LIVE + " RETURNING j.id"
)
