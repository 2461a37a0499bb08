"""The worker's lease of a job, up to its outcome: the claim (pending -> claimed, a new
lease, the job's advisory lock), the idle timer, the start and heartbeats of jobs in
flight, a running job's progress; after a reconnect, the re-lock of the jobs held and
the release of those a lost claim left behind; and the reaper's hand-over of jobs
whose worker is gone (their advisory locks taken, or let go). The outcomes that end a
lease are in :mod:`jobq.store.sql.outcomes`, built on the status test and the id
condition of the writes by id here (BY_ID_IN_FLIGHT, BY_IDS).

Run by :mod:`jobq.jobs.leases` (the worker's side of the queue, for
:mod:`jobq.daemon.worker`), :mod:`jobq.daemon.worker.session` (CLAIM_SESSION_PLANNER,
on its claim session) and :mod:`jobq.daemon.maintenance.reaper` (JOB_LOCK_STALE,
JOB_LOCK_INFLIGHT_OF_WORKER, JOB_COUNT_INFLIGHT_OF_WORKER, JOB_UNLOCK).
"""

from __future__ import annotations

from jobq.store.sql.fragments import EACH_PRIORITY, LIVE, OPEN_QUEUES, claimed_columns

# JOB_CLAIM: pending -> claimed for up to {limit} due jobs of some queues, each with a
# new lease. Paused queues are left out first (OPEN_QUEUES: one primary-key probe of
# jobq_queues per queue, none per row). Per queue left, an index range scan of
# jobs_pending_claim_idx in claim order that stops at the limit and skips row-locked
# rows (SKIP LOCKED) instead of waiting; the queues' candidates are merged in claim
# order. The advisory lock is taken in RETURNING, so only on the rows actually
# returned; the row locks of candidates left over end with the statement. The claim
# size {limit} is spelt in the text (jobq.jobs.leases.claim_statement), not sent as a
# parameter: a generic plan of LIMIT $n is costed for a tenth of the rows the planner
# expects, so once jobs_live's statistics count a backlog the plan cache kept planning
# each claim afresh (0.3 ms more a claim on the partitioned table, custom plans only);
# with the size known, the cached plan is the custom one.
#
# A worker that takes hand-offs (%(hand_off)s) says on its row whether it waits for one
# (schema 28: JOB_INSERT_HANDED hands the next job of its queues to a worker whose
# waiting_since is set): set when the claim found no candidate, cleared when it found
# some. Its row is written only when that changes (a claim of a busy worker only reads
# it), and skipped while locked: an enqueue is handing it a job, and clears it.
#
# The rows to update ({rows}) are found again by their ctid where the candidates' read
# gives it: a TID scan of jobs_live (the LIVE test prunes the update to it; it is one
# table, not partitioned, so a ctid names one row of it) instead of a probe of its
# primary key per job, 1 µs a job less of a claim of 1,000 (benchmark/README.md, "The
# worker's garbage collector, and a claim's empty errors"). A candidate's row is locked,
# so its ctid is still its own when the update reads it; one a committed update had
# changed after the statement's snapshot (its lock then taken on the newer version) is
# not seen by the update, and simply not claimed: pending, as it was.
_CLAIM_OF = (
    "WITH " + OPEN_QUEUES + ", "
    "due AS ({due}), "
    "flag AS (UPDATE workers AS w SET waiting_since = CASE WHEN EXISTS (SELECT FROM due) THEN NULL ELSE now() END "
    "WHERE w.id = (SELECT f.id FROM workers AS f WHERE %(hand_off)s AND f.id = %(worker_id)s "
    "AND (f.waiting_since IS NULL) = NOT EXISTS (SELECT FROM due) FOR UPDATE SKIP LOCKED)) "
    "UPDATE jobs AS j SET status = 'claimed', claimed_at = now(), heartbeat_at = now(), "
    "started_at = NULL, worker_id = %(worker_id)s, lease = nextval('jobs_lease_seq') "
    "{rows} AND j." + LIVE + " "
    "RETURNING " + claimed_columns("j.") + ", "
    "pg_try_advisory_lock(%(lock_base)s | j.id)"
)
JOB_CLAIM = _CLAIM_OF.replace("{due}", (
    "SELECT c.ctid FROM open_queues AS q, LATERAL ("
    "SELECT ctid, priority, run_at, id FROM jobs "
    "WHERE status = 'pending' AND queue = q.queue AND run_at <= now() "
    "ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) AS c "
    "ORDER BY c.priority DESC, c.run_at, c.id LIMIT {limit}")).replace(
    "{rows}", "WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM due))")

# JOB_CLAIM_OF_SEVERAL_QUEUES: the same claim for a worker of more than one queue, its
# candidates read and locked by jobq_claim_candidates (migration 0026), which plans
# each queue's read through the claim index whatever the planner guesses of its size;
# it returns their ids, which the update probes.
JOB_CLAIM_OF_SEVERAL_QUEUES = _CLAIM_OF.replace("{due}", (
    "SELECT c.id FROM jobq_claim_candidates(ARRAY(SELECT queue FROM open_queues), {limit}) AS c")).replace(
    "{rows}", "FROM due WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.id = due.id")

# CLAIM_SESSION_PLANNER: a worker's claim session never plans a bitmap scan. Autovacuum
# analyses jobs_live whenever a fiftieth of it changed, and a queue that just drained
# is then analysed empty (reltuples = 0). Until the next analysis the planner believes
# a backlog that arrives is one row, and served the claim by reading every due job of
# the queue through a bitmap scan and sorting them all (47 ms a claim with 100,000
# waiting, so the drain fell to a third and the backlog grew: the stalls of the first
# soak of schema 13), instead of the first ones through jobs_pending_claim_idx in
# order. Every statement of the session is a range of that index or probes by id,
# which a plain index scan serves as well.
# And it plans each of its statements once (a generic plan, kept by the session until
# a table it reads is analysed again). Left to choose, PostgreSQL plans a statement
# afresh at each call whenever it estimates that plan cheaper than the generic one
# (which knows no parameter's value): it did so for JOB_CLAIM on PostgreSQL 16 and not
# on 15 with the same data, and the planning was 14 % of the backend's CPU in a claim
# of 50 with its outcomes (0.33 ms of 2.4). No statement of the session needs a
# parameter's value to plan well: each is a range of the claim index or probes by id,
# its status a constant (the partitions of jobs pruned as it is planned), and the
# functions it calls pin their plan types themselves.
CLAIM_SESSION_PLANNER = (
    "SELECT set_config('enable_bitmapscan', 'off', false), set_config('plan_cache_mode', 'force_generic_plan', false)"
)

# JOB_TAKE_HANDED: the jobs handed to this worker (JOB_INSERT_HANDED) by id and lease, as
# the notifications named them (primary key), still claimed in its name under those
# leases, with their advisory locks taken (in the select list: only on rows returned).
# A lease is drawn once from a sequence, so ids and leases need not be paired: 0.19 ms a
# round trip on an idle server, against 0.24 for a join with the pairs.
JOB_TAKE_HANDED = (
    "SELECT " + claimed_columns() + ", pg_try_advisory_lock(%(lock_base)s | id) FROM jobs "
    "WHERE id = ANY(%(ids)b::bigint[]) AND " + LIVE + " AND lease = ANY(%(leases)b::bigint[]) "
    "AND status = 'claimed' AND worker_id = %(worker_id)s"
)

# JOB_TAKE_HANDED_UNHEARD: the jobs claimed in this worker's name that it does not hold
# (%(held)s): handed to it while its notification could not reach it (the listener's
# connection lost). Asked after a wait that no notification ended; the claimed and
# running rows read through jobs_inflight_heartbeat_idx, as the reaper's
# JOB_LOCK_INFLIGHT_OF_WORKER.
JOB_TAKE_HANDED_UNHEARD = (
    "SELECT " + claimed_columns() + ", pg_try_advisory_lock(%(lock_base)s | id) FROM jobs "
    "WHERE status IN ('claimed', 'running') AND status = 'claimed' AND worker_id = %(worker_id)s "
    "AND id <> ALL(%(held)b::bigint[])"
)

# JOB_NEXT_RUN_AT: seconds until the earliest pending job of some queues is due, so an
# idle worker sleeps until then and not a whole poll interval; paused queues are left
# out first (one primary-key probe of jobq_queues per queue: OPEN_QUEUES), so that no
# idle worker spins on a paused queue's due jobs; then one probe of the claim index per
# queue and priority (EACH_PRIORITY). NULL when nothing is pending.
JOB_NEXT_RUN_AT = (
    "WITH " + OPEN_QUEUES + " SELECT extract(epoch FROM min(next.run_at) - now())::float8 "
    "FROM open_queues AS q CROSS JOIN " + EACH_PRIORITY + ", LATERAL ("
    "SELECT run_at FROM jobs WHERE status = 'pending' AND queue = q.queue AND priority = p.priority "
    "ORDER BY run_at LIMIT 1) AS next"
)


# The status test of a write by id (a batch's starts, heartbeats and outcomes, a
# re-lock): spelt as a CASE, which the planner cannot match to the partial index
# jobs_inflight_heartbeat_idx. With statistics taken while few jobs were in flight,
# the planner would otherwise scan that whole index (every job in flight, and every
# entry left since the last vacuum) and hash-join it with the batch, instead of one
# primary-key probe per job: 8 workers drained 7,813 jobs/s that way, 15,924 with
# this (benchmark/README.md).
# The LIVE test before it prunes the plan to jobs_live (a CASE cannot).
def _status_is(*statuses: str) -> str:
    return "j." + LIVE + " AND CASE j.status " + " ".join(f"WHEN '{s}' THEN true" for s in statuses) + " ELSE false END"


# BY_ID_IN_FLIGHT: that test for the statuses in flight (claimed|running), the guard of
# the heartbeats, re-locks and outcomes by id (jobq.store.sql.outcomes).
BY_ID_IN_FLIGHT = _status_is("claimed", "running")

# BY_IDS: the ids of a batch as an index condition of its own, beside the join with the
# batch's arrays: with statistics taken while jobs_live was empty (reltuples = 0), the
# join alone was planned as a full scan of jobs_live or of its primary key per write.
BY_IDS = "j.id = ANY(%(ids)b::bigint[])"

# JOB_START_IF_LEASED: claimed -> running, guarded by lease and status; started_at is
# the database's now() less the time the worker has already been running it.
JOB_START_IF_LEASED = (
    "UPDATE jobs AS j SET status = 'running', heartbeat_at = now(), "
    "started_at = now() - make_interval(secs => s.elapsed) "
    "FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(elapsed)b::float8[]) AS s(id, lease, elapsed) "
    "WHERE " + BY_IDS + " AND j.id = s.id AND j.lease = s.lease AND " + _status_is("claimed") + " "
    "RETURNING j.id"
)

# JOB_HEARTBEAT_IF_LEASED: touch heartbeat_at of in-flight rows still held under the
# given leases (primary key); the ids not returned were taken away.
JOB_HEARTBEAT_IF_LEASED = (
    "UPDATE jobs AS j SET heartbeat_at = now() "
    "FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[]) AS s(id, lease) "
    "WHERE " + BY_IDS + " AND j.id = s.id AND j.lease = s.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id"
)

# JOB_SET_PROGRESS_IF_LEASED: a running job's latest progress, written by its worker's
# heartbeat thread; guarded by lease and status (primary key). No status change: the
# counters' trigger finds nothing to count.
JOB_SET_PROGRESS_IF_LEASED = (
    "UPDATE jobs AS j SET progress = %(progress)s::jsonb "
    "WHERE j.id = %(id)s AND j.lease = %(lease)s AND " + BY_ID_IN_FLIGHT + " RETURNING j.id"
)

# JOB_RELOCK_IF_LEASED: after a reconnect, take again the advisory locks of jobs this
# worker still holds under its leases. Per job: whether it is still in flight under
# the lease (false: someone took it back), and whether its lock was taken (false too
# where another session holds it). The rows are locked first (FOR UPDATE, primary
# key) and their lease and status checked on the latest version: a release that
# already let go of the advisory lock but has not committed yet (outcome statements
# unlock before their commit) is waited for, so a job that is pending again is never
# locked.
JOB_RELOCK_IF_LEASED = (
    "WITH mine AS MATERIALIZED (SELECT j.id FROM jobs AS j "
    "JOIN unnest(%(ids)b::bigint[], %(leases)b::bigint[]) AS s(id, lease) ON j.id = s.id AND j.lease = s.lease "
    "WHERE " + BY_IDS + " AND " + BY_ID_IN_FLIGHT + " FOR UPDATE OF j) "
    "SELECT s.id, mine.id IS NOT NULL, mine.id IS NOT NULL AND pg_try_advisory_lock(%(lock_base)s | s.id) "
    "FROM unnest(%(ids)b::bigint[]) AS s(id) LEFT JOIN mine ON mine.id = s.id"
)

# JOB_RELEASE_ORPHANS_OF_WORKER: after a reconnect, claimed jobs of this worker that it
# does not know it holds (a claim that committed while its answer was lost with the
# connection) go back to pending at once, no attempt counted; the worker runs no job
# it does not know, and its old session, which had their locks, is gone.
JOB_RELEASE_ORPHANS_OF_WORKER = (
    "UPDATE jobs SET status = 'pending', started_at = NULL "
    "WHERE worker_id = %(worker_id)s AND status = 'claimed' AND id <> ALL(%(held)b::bigint[]) RETURNING id"
)

# JOB_LOCK_INFLIGHT_OF_WORKER: the claimed|running jobs of one worker (a scan of the
# small jobs_inflight_heartbeat_idx) whose advisory lock this session can take, that
# is, whose worker's session is gone. The candidates are fixed first (MATERIALIZED),
# so no other row's lock is ever tried.
JOB_LOCK_INFLIGHT_OF_WORKER = (
    "WITH mine AS MATERIALIZED (SELECT id, lease, status, attempt, queue, type FROM jobs "
    "WHERE worker_id = %(worker_id)s AND status IN ('claimed', 'running')) "
    "SELECT id, lease, status, attempt, queue, type FROM mine WHERE pg_try_advisory_lock(%(lock_base)s | id)"
)

# JOB_COUNT_INFLIGHT_OF_WORKER: how many claimed|running jobs a worker still has.
JOB_COUNT_INFLIGHT_OF_WORKER = (
    "SELECT count(*) FROM jobs WHERE worker_id = %(worker_id)s AND status IN ('claimed', 'running')"
)

# JOB_LOCK_STALE: claimed|running jobs whose heartbeat is older than the threshold
# (jobs_inflight_heartbeat_idx), oldest first, but for those of the workers spared
# (alive, known to the reaping supervisor), of which only those whose advisory lock
# this session can take: a job whose worker session is still connected is never
# handed on, however late its heartbeat.
JOB_LOCK_STALE = (
    "WITH stale AS MATERIALIZED (SELECT id, lease, status, attempt, queue, type FROM jobs "
    "WHERE status IN ('claimed', 'running') AND heartbeat_at < now() - make_interval(secs => %(stale_seconds)s) "
    "AND coalesce(worker_id, '') <> ALL(%(spared)s::text[]) "
    "ORDER BY heartbeat_at LIMIT %(limit)s) "
    "SELECT id, lease, status, attempt, queue, type FROM stale WHERE pg_try_advisory_lock(%(lock_base)s | id)"
)

# JOB_UNLOCK: let go of the advisory locks of jobs this session took and will not
# write after all (a recovery whose write failed: it tries again next pass).
JOB_UNLOCK = "SELECT pg_advisory_unlock(%(lock_base)s | id) FROM unnest(%(ids)b::bigint[]) AS s(id)"
