"""Queues: their pauses (jobq_queues, a table of a few rows: list, pause, resume, each
announced on jobq_control), and the reads of pending jobs per queue through the claim
index (the oldest due job, how many are scheduled ahead). The claim's side of a pause
is :data:`jobq.store.sql.fragments.OPEN_QUEUES`.

Run by :mod:`jobq.jobs.queues` (pause, resume, the queues' listing),
:mod:`jobq.observe.metrics` and :mod:`jobq.observe.inspection` (QUEUE_LIST,
JOB_GET_OLDEST_DUE) and :mod:`jobq.observe.tallies` (JOB_COUNT_SCHEDULED_UP_TO, the
dashboard's).
"""

from __future__ import annotations

from jobq.store.sql.fragments import EACH_PRIORITY

# QUEUE_LIST: every queue ever paused, with its pause (a table of a few rows, no lock);
# paused_at is NULL for a queue resumed since.
QUEUE_LIST = "SELECT name, paused_at, paused_by, reason FROM jobq_queues ORDER BY name"

# QUEUE_LIST_NEVER_NAMED: of some names, those no job (job_counters keeps a row per queue
# it ever counted), pause (jobq_queues' primary key), live or stale worker (workers, a few
# rows) or schedule (jobq_schedules, a few rows) has named: most likely a typo. Read
# before a pause, which creates the queue's row.
QUEUE_LIST_NEVER_NAMED = (
    "SELECT n.name FROM unnest(%(names)b::text[]) AS n(name) "
    "WHERE NOT EXISTS (SELECT 1 FROM job_counters AS c WHERE c.queue = n.name) "
    "AND NOT EXISTS (SELECT 1 FROM jobq_queues AS q WHERE q.name = n.name) "
    "AND NOT EXISTS (SELECT 1 FROM workers AS w WHERE n.name = ANY(w.queues)) "
    "AND NOT EXISTS (SELECT 1 FROM jobq_schedules AS s WHERE s.queue = n.name) ORDER BY n.name"
)

# QUEUE_PAUSE_IF_NOT_PAUSED: pause some queues (a row is created for a queue that has
# none), guarded by paused_at IS NULL: a queue already paused keeps its first pause and
# is not returned. Rows are written in name order (the caller sorts), so two pauses
# never lock them in opposite orders. Each queue paused is announced on jobq_control
# ('pause <queue>'), delivered at commit. Returns the queues paused by this statement.
QUEUE_PAUSE_IF_NOT_PAUSED = (
    "WITH paused AS (INSERT INTO jobq_queues AS q (name, paused_at, paused_by, reason) "
    "SELECT name, now(), %(actor)s, %(reason)s FROM unnest(%(names)b::text[]) AS n(name) "
    "ON CONFLICT (name) DO UPDATE SET paused_at = excluded.paused_at, paused_by = excluded.paused_by, "
    "reason = excluded.reason WHERE q.paused_at IS NULL RETURNING q.name) "
    "SELECT name, pg_notify(jobq_control_channel(), 'pause ' || name) FROM paused"
)

# QUEUE_RESUME_IF_PAUSED: resume some queues (all paused ones when %(names)s is NULL),
# guarded by paused_at IS NOT NULL (primary key, or a scan of the few rows for all).
# Each queue resumed is announced on jobq_control ('resume <queue>') and, when it has
# pending jobs (their depth from job_counters, no jobs scan), wakes idle workers at
# once as an enqueue does (jobq_wake: '<queue> <n>' on jobq). Returns each queue resumed
# with its pending depth.
QUEUE_RESUME_IF_PAUSED = (
    "WITH resumed AS (UPDATE jobq_queues SET paused_at = NULL, paused_by = NULL, reason = NULL "
    "WHERE paused_at IS NOT NULL AND (%(names)b::text[] IS NULL OR name = ANY(%(names)b::text[])) RETURNING name), "
    "depth AS (SELECT r.name, (SELECT coalesce(sum(c.n), 0) FROM job_counters AS c "
    "WHERE c.queue = r.name AND c.name = 'pending')::bigint AS pending FROM resumed AS r) "
    "SELECT name, pending, pg_notify(jobq_control_channel(), 'resume ' || name), "
    "CASE WHEN pending > 0 THEN jobq_wake(ARRAY[name], ARRAY[pending]) END FROM depth"
)

# JOB_GET_OLDEST_DUE: the oldest due pending job of each of some queues (one probe of
# the claim index per queue and priority: EACH_PRIORITY), oldest first.
JOB_GET_OLDEST_DUE = (
    "SELECT id, type, queue, run_at, extract(epoch FROM now() - run_at)::float8 FROM ("
    "SELECT DISTINCT ON (j.queue) j.id, j.type, j.queue, j.run_at "
    "FROM unnest(%(queues)b::text[]) AS q(queue) CROSS JOIN " + EACH_PRIORITY + ", LATERAL ("
    "SELECT id, type, queue, run_at FROM jobs "
    "WHERE status = 'pending' AND queue = q.queue AND priority = p.priority AND run_at <= now() "
    "ORDER BY run_at LIMIT 1) AS j ORDER BY j.queue, j.run_at) AS oldest ORDER BY run_at"
)

# JOB_COUNT_SCHEDULED_UP_TO: per queue, pending jobs whose run_at is still ahead, counted
# no further than %(cap)s (a range of the claim index per queue and priority, until
# %(cap)s are found: EACH_PRIORITY).
JOB_COUNT_SCHEDULED_UP_TO = (
    "SELECT q.queue, (SELECT count(*) FROM (SELECT FROM " + EACH_PRIORITY + ", LATERAL ("
    "SELECT FROM jobs WHERE status = 'pending' AND queue = q.queue AND priority = p.priority AND run_at > now() "
    "LIMIT %(cap)s) AS s LIMIT %(cap)s) AS c) FROM unnest(%(queues)s::text[]) AS q(queue)"
)
