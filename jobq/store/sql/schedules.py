"""Schedules (jobq_schedules): the workers' declarations, an operator's pause, resume and
run-now, the listing, the leader's firing (due schedules locked, one job per slot, the
schedule advanced), the pruning of orphans; and the jobs they insert. A worker is live
while its heartbeat is younger than %(stale_seconds)s; a schedule fires while a live
worker declares it (workers.schedules ? name: a seq scan of a table of a few rows per
worker process).

Run by :mod:`jobq.schedules.stored` (declaring and operating them) and
:mod:`jobq.daemon.maintenance.firing` (the leader's firing). A worker's declarations on
its own row are in :mod:`jobq.store.sql.workers`; the database's clock that slots are
computed against is :data:`jobq.store.sql.database.DATABASE_NOW`.
"""

from __future__ import annotations

from jobq.store.sql.fragments import JOB_COLUMNS, KEYED_INSERT, KEYED_INSERT_COLUMNS

# SCHEDULE_UPSERT_IF_CHANGED: a worker's declarations, in name order (two workers booting
# at once lock the rows in one order). A new name is inserted; a known one whose
# definition hash differs is replaced (the newest upsert wins), keeping next_run_at
# unless the cron or zone changed; paused_* are never touched (what an operator paused
# stays paused). Returns the names inserted or changed.
SCHEDULE_UPSERT_IF_CHANGED = (
    "INSERT INTO jobq_schedules AS s (name, cron, tz, type, queue, payload, priority, max_retries, catch_up, "
    "overlap, hash, next_run_at) "
    "SELECT * FROM unnest(%(names)b::text[], %(crons)b::text[], %(tzs)b::text[], %(types)b::text[], "
    "%(queues)b::text[], %(payloads)b::jsonb[], %(priorities)b::smallint[], %(max_retries)b::int[], "
    "%(catch_ups)b::text[], %(overlaps)b::text[], %(hashes)b::text[], %(next_run_ats)b::timestamptz[]) ORDER BY 1 "
    "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, type = excluded.type, "
    "queue = excluded.queue, payload = excluded.payload, priority = excluded.priority, "
    "max_retries = excluded.max_retries, catch_up = excluded.catch_up, overlap = excluded.overlap, "
    "hash = excluded.hash, updated_at = now(), next_run_at = CASE WHEN (s.cron, s.tz) = (excluded.cron, excluded.tz) "
    "THEN s.next_run_at ELSE excluded.next_run_at END "
    "WHERE s.hash <> excluded.hash "
    "RETURNING name"
)

# _LIVE_DECLARER: a worker with a fresh heartbeat declares schedule s.
_LIVE_DECLARER = (
    "EXISTS (SELECT FROM workers AS w WHERE w.schedules ? s.name "
    "AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s))"
)

# SCHEDULE_LOCK_DUE: the leader's due schedules (next_run_at passed, not paused, declared
# by a live worker), row-locked for the firing transaction; rows another leader holds
# are skipped (SKIP LOCKED), and a row it advanced meanwhile is re-read and no longer
# due. With whether the schedule has a job pending, claimed or running
# (jobs_schedule_active_idx), and the transaction's now().
SCHEDULE_LOCK_DUE = (
    "SELECT s.name, s.cron, s.tz, s.type, s.queue, s.catch_up, s.overlap, s.next_run_at, "
    "EXISTS (SELECT FROM jobs AS j WHERE j.schedule = s.name AND j.status IN ('pending', 'claimed', 'running')), "
    "now() FROM jobq_schedules AS s "
    "WHERE s.paused_at IS NULL AND s.next_run_at <= now() AND " + _LIVE_DECLARER + " "
    "ORDER BY s.name LIMIT %(limit)s FOR UPDATE OF s SKIP LOCKED"
)

# JOB_INSERT_SCHEDULED: one job per slot of schedule %(name)s, its spec read from the
# schedule's row (locked by the caller), with the idempotency key 'cron:<name>:<slot>'
# (held 'always', see KEYED_INSERT), so that a slot fired twice (two leaders during a
# failover) makes one job. Returns the jobs inserted, oldest slot first.
JOB_INSERT_SCHEDULED = KEYED_INSERT.format(
    columns=KEYED_INSERT_COLUMNS + ", schedule, scheduled_for",
    rows="SELECT s.type, s.queue, s.payload, s.priority, s.max_retries, now(), k.key AS idempotency_key, "
    "NULL::text[], 'always', s.name, k.slot "
    "FROM jobq_schedules AS s, unnest(%(slots)b::timestamptz[], %(keys)b::text[]) AS k(slot, key) "
    "WHERE s.name = %(name)s ORDER BY k.slot",
    returning="id, scheduled_for",
) + " ORDER BY scheduled_for"

# SCHEDULE_ADVANCE_IF_NEXT_RUN_AT: the next slot, and the latest fired, of a schedule
# the caller locked; guarded by the next_run_at it read (a row advanced by someone else
# matches nothing).
SCHEDULE_ADVANCE_IF_NEXT_RUN_AT = (
    "UPDATE jobq_schedules SET next_run_at = %(next_run_at)s, "
    "last_run_at = coalesce(%(last_run_at)s, last_run_at), last_job_id = coalesce(%(last_job_id)s, last_job_id) "
    "WHERE name = %(name)s AND next_run_at = %(was)s RETURNING name"
)

# SCHEDULE_NEXT_DUE_IN: seconds until the earliest slot of the schedules that would fire
# (not paused, declared by a live worker); negative when one is due; NULL when none.
# A scan of jobq_schedules (one row per schedule).
SCHEDULE_NEXT_DUE_IN = (
    "SELECT extract(epoch FROM min(s.next_run_at) - now())::float8 FROM jobq_schedules AS s "
    "WHERE s.paused_at IS NULL AND " + _LIVE_DECLARER
)

# SCHEDULE_LIST: every schedule with how many live workers declare it (0: orphaned) and
# the status of its last job (primary key), by name; no lock.
SCHEDULE_SELECT = (
    "SELECT s.name, s.cron, s.tz, s.type, s.queue, s.payload, s.priority, s.max_retries, s.catch_up, s.overlap, "
    "s.hash, s.paused_at, s.paused_by, s.reason, s.next_run_at, s.last_run_at, s.last_job_id, "
    "s.created_at, s.updated_at, "
    "(SELECT count(*) FROM workers AS w WHERE w.schedules ? s.name "
    "AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s))::int AS declared_by, "
    "(SELECT j.status FROM jobs AS j WHERE j.id = s.last_job_id) AS last_job_status, "
    "extract(epoch FROM now() - s.last_run_at)::float8 AS last_run_age_seconds "
    "FROM jobq_schedules AS s"
)
SCHEDULE_LIST = SCHEDULE_SELECT + " ORDER BY s.name"

# SCHEDULE_GET: one schedule (primary key), as SCHEDULE_LIST shows it.
SCHEDULE_GET = SCHEDULE_SELECT + " WHERE s.name = %(name)s"

# JOB_LIST_OF_SCHEDULE: a schedule's latest jobs, newest first (jobs_schedule_created_idx).
JOB_LIST_OF_SCHEDULE = (
    "SELECT " + JOB_COLUMNS + " FROM jobs WHERE schedule = %(name)s ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
)

# SCHEDULE_PAUSE: an operator pauses a schedule (primary key); a second pause keeps the
# first time and records the latest who and why. No row: no such schedule.
SCHEDULE_PAUSE = (
    "UPDATE jobq_schedules SET paused_at = coalesce(paused_at, now()), paused_by = %(actor)s, reason = %(reason)s "
    "WHERE name = %(name)s RETURNING name"
)

# SCHEDULE_RESUME: an operator resumes a schedule (primary key; the row lock orders it
# with a concurrent pause); returns whether it was paused. No row: no such schedule.
SCHEDULE_RESUME = (
    "WITH was AS (SELECT name, paused_at IS NOT NULL AS paused FROM jobq_schedules WHERE name = %(name)s FOR UPDATE) "
    "UPDATE jobq_schedules AS s SET paused_at = NULL, paused_by = NULL, reason = NULL FROM was "
    "WHERE s.name = was.name RETURNING was.paused"
)

# JOB_INSERT_SCHEDULE_RUN: an operator's run-now: one job from the schedule's spec
# (primary key), outside the slot sequence (no scheduled_for, no key), recorded as the
# schedule's last job. No row: no such schedule.
JOB_INSERT_SCHEDULE_RUN = (
    "WITH job AS (INSERT INTO jobs (type, queue, payload, priority, max_retries, schedule) "
    "SELECT type, queue, payload, priority, max_retries, name FROM jobq_schedules WHERE name = %(name)s "
    "RETURNING " + JOB_COLUMNS + "), "
    "mark AS (UPDATE jobq_schedules AS s SET last_job_id = job.id FROM job WHERE s.name = job.schedule) "
    "SELECT " + JOB_COLUMNS + " FROM job"
)

# SCHEDULE_DELETE_ORPHANS: prune the schedules no live worker declares; returns their names.
SCHEDULE_DELETE_ORPHANS = "DELETE FROM jobq_schedules AS s WHERE NOT " + _LIVE_DECLARER + " RETURNING s.name"

# CONTROL_NOTIFY_SCHEDULES: tell the maintenance leader (jobq_control) that a schedule was
# created, changed or resumed, so that it looks again now rather than at its next tick.
# Sent at commit.
CONTROL_NOTIFY_SCHEDULES = "SELECT pg_notify(jobq_control_channel(), 'schedules')"
