"""Worker rows (workers: one per worker process, a table of a few rows): register,
heartbeat, delete, declare schedules; and the reads of them, with the job each runs.

Run by :mod:`jobq.daemon.presence` (a worker's own row, and the maintenance leader's
removal of stale ones), :mod:`jobq.schedules.stored` (conflicting declarations),
:mod:`jobq.jobs.queues` and :mod:`jobq.observe.metrics` (the queues of live workers),
:mod:`jobq.observe.inspection` (WORKER_LIST) and :mod:`jobq.observe.workers`
(WORKER_LIST_WITH_JOB, the dashboard's).
"""

from __future__ import annotations

# The queues a worker serves as operators read them: an --all-queues worker's as one
# entry, "(all queues)" (its queues column is empty).
QUEUES_SHOWN = "CASE WHEN w.all_queues THEN ARRAY['(all queues)'] ELSE w.queues END"

# WORKER_REGISTER: a worker process announces itself (primary key; a restarted pid
# with the same id replaces the stale row).
WORKER_REGISTER = (
    "INSERT INTO workers (id, hostname, pid, queues, all_queues, handler_types) "
    "VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(all_queues)s, %(handler_types)s) "
    "ON CONFLICT (id) DO UPDATE SET started_at = now(), heartbeat_at = now(), current_job_id = NULL, jobs_done = 0"
)

# WORKER_LIST_HANDLER_TYPES: the job types the live workers have handlers for (a table of
# a few rows per worker process, seq scan), and how many live workers did not say (an
# older release: then nothing can be called unhandled).
WORKER_LIST_HANDLER_TYPES = (
    "SELECT coalesce(array_agg(DISTINCT t.type) FILTER (WHERE t.type IS NOT NULL), '{}'), "
    "count(*) FILTER (WHERE w.handler_types IS NULL), count(DISTINCT w.id) "
    "FROM workers AS w LEFT JOIN LATERAL unnest(w.handler_types) AS t(type) ON true "
    "WHERE w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s)"
)

# WORKER_HEARTBEAT: the worker is alive, runs this job (or none), has recorded this many.
WORKER_HEARTBEAT = (
    "UPDATE workers SET heartbeat_at = now(), current_job_id = %(current_job_id)s, jobs_done = %(jobs_done)s "
    "WHERE id = %(id)s"
)

# WORKER_LOCK_BUDGET: how many jobs one worker may hold claimed, by the advisory locks
# they take (one each, held until the outcome): half of the server's lock table
# (max_locks_per_transaction slots per connection, shared by every database of the
# server) over the workers registered on this database, this one counted whether or not
# it has registered yet (a table of a few rows per worker process, seq scan). Past the table, every session of the server gets "out of
# shared memory"; the other half is left for everything else.
WORKER_LOCK_BUDGET = (
    "SELECT current_setting('max_locks_per_transaction')::int8 * (current_setting('max_connections')::int8 "
    "+ current_setting('max_prepared_transactions')::int8) / 2 / (1 + (SELECT count(*) FROM workers WHERE id <> %(id)s))"
)

# WORKER_TAKE_WAITING: the enqueue of one job (JOB_INSERT_HANDED) takes a waiting worker
# of its queue, if any and if the job may be handed over (due now, no concurrency key,
# its queue neither paused nor limited, jobq.notify not 'off'): the one waiting longest,
# row-locked SKIP LOCKED, its flag cleared; returns its id.
WORKER_TAKE_WAITING = (
    "UPDATE workers AS w SET waiting_since = NULL WHERE w.id = ("
    "SELECT f.id FROM workers AS f WHERE f.waiting_since IS NOT NULL AND (f.all_queues OR %(queue)s = ANY(f.queues)) "
    "AND %(concurrency_key)s::text IS NULL AND coalesce(%(run_at)s, now()) <= now() "
    "AND current_setting('jobq.notify', true) IS DISTINCT FROM 'off' "
    "AND NOT EXISTS (SELECT FROM jobq_queues AS q WHERE q.name = %(queue)s AND (q.paused_at IS NOT NULL "
    "OR q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL OR q.fair)) "
    "ORDER BY f.waiting_since LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING w.id"
)

# WORKER_STOP_WAITING: a worker leaving is handed no more jobs (its flag cleared; primary
# key; waits for an enqueue that holds the row, handing it a job).
WORKER_STOP_WAITING = "UPDATE workers SET waiting_since = NULL WHERE id = %(id)s AND waiting_since IS NOT NULL"

# WORKER_DELETE: a worker leaving cleanly removes its row.
WORKER_DELETE = "DELETE FROM workers WHERE id = %(id)s"

# WORKER_DELETE_IF_STALE: the maintenance leader removes the rows of workers whose
# heartbeat stopped (a seq scan of a table of a few rows per worker process).
WORKER_DELETE_IF_STALE = (
    "DELETE FROM workers WHERE heartbeat_at < now() - make_interval(secs => %(stale_seconds)s) RETURNING id"
)

# WORKER_DECLARE_SCHEDULES: the names and definition hashes a worker declares, on its
# own row (primary key).
WORKER_DECLARE_SCHEDULES = "UPDATE workers SET schedules = %(schedules)s::jsonb WHERE id = %(id)s"

# WORKER_LIST_SCHEDULE_CONFLICTS: of some declarations, those that another live worker
# declares with a different hash (a rolling deploy): name and how many such workers.
WORKER_LIST_SCHEDULE_CONFLICTS = (
    "SELECT d.name, count(*) FROM workers AS w, jsonb_each_text(w.schedules) AS d(name, hash) "
    "WHERE w.id <> %(id)s AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s) "
    "AND %(schedules)s::jsonb ? d.name AND %(schedules)s::jsonb ->> d.name <> d.hash "
    "GROUP BY d.name ORDER BY d.name"
)

# WORKER_LIST: every registered worker with its heartbeat age (a table of a few rows), and
# the progress of the job it runs (one primary-key probe each).
WORKER_LIST = (
    "SELECT w.id, w.hostname, w.pid, " + QUEUES_SHOWN + ", w.current_job_id, w.jobs_done, w.started_at, "
    "extract(epoch FROM now() - w.heartbeat_at)::float8, "
    "(SELECT j.progress FROM jobs AS j WHERE j.id = w.current_job_id) "
    "FROM workers AS w ORDER BY w.hostname, w.pid"
)

# WORKER_LIST_WITH_JOB: every registered worker (a table of a few rows) with its heartbeat
# age, and the job it runs (one primary-key probe each): progress (as WORKER_LIST), type,
# status, and how long it has run (since started_at, else claimed_at).
WORKER_LIST_WITH_JOB = (
    "SELECT w.id, w.hostname, w.pid, " + QUEUES_SHOWN + ", w.current_job_id, w.jobs_done, w.started_at, "
    "extract(epoch FROM now() - w.heartbeat_at)::float8, j.progress, j.type, j.status, "
    "extract(epoch FROM now() - coalesce(j.started_at, j.claimed_at))::float8 "
    "FROM workers AS w LEFT JOIN jobs AS j ON j.id = w.current_job_id ORDER BY w.hostname, w.pid"
)

# WORKER_LIST_ACTIVE_QUEUES: the queues of each worker whose heartbeat is fresh, and
# whether it serves every queue.
WORKER_LIST_ACTIVE_QUEUES = (
    "SELECT queues, all_queues FROM workers WHERE heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s)"
)
