"""Flow control (schemas 20 and 23): the limits of queues (columns of jobq_queues) and the
rules on concurrency keys (jobq_limits); the claim under limits (jobq_claim_limited,
its slots in jobq_limit_slots, its starts in jobq_limit_starts), the release of a
claim's slots with its outcome, and the reaper's sweep of slots whose holder is gone.

Run by :mod:`jobq.limits` (rules, queue limits, the claim under limits, the gate that
tells a worker whether any limit applies to its queues) and, through it, by the
worker (:mod:`jobq.daemon.worker`) and the reaper (:mod:`jobq.daemon.maintenance`).
"""

from __future__ import annotations

from jobq.store.sql.fragments import claimed_columns

# LIMITS_APPLY: whether any limit can bind a claim of some queues: a rule on keys
# (any queue's jobs may carry a key), or a limit on one of the queues (primary key
# probes of jobq_queues); whether a rule on keys exists; and whether one of the queues
# has a rate (only then is LIMIT_RATE_OPENS_IN worth sending with a claim). Asked by a
# worker at most once a second (jobq.limits.gate).
LIMITS_APPLY = (
    "SELECT keyed OR EXISTS (SELECT FROM jobq_queues "
    "WHERE name = ANY(%(queues)b::text[]) AND (concurrency IS NOT NULL OR rate_count IS NOT NULL OR fair)), keyed, "
    "EXISTS (SELECT FROM jobq_queues WHERE name = ANY(%(queues)b::text[]) AND rate_count IS NOT NULL) "
    "FROM (SELECT EXISTS (SELECT FROM jobq_limits) AS keyed) AS k"
)

# JOB_CLAIM_LIMITED: the claim under limits, by jobq_claim_limited (migration 0020, its
# body replaced by 0023: a queue limited by concurrency alone is counted in stripes,
# its lock taken shared and its stripes' locks tried; a rate or fair queue's lock
# waited for; each key's tried; slots and starts counted by statements that start
# after those locks are held; rows locked SKIP LOCKED). Returns claimed_columns, whether
# the job's advisory lock was taken, and whether it holds a slot.
_CLAIM_LIMITED = (
    "SELECT " + claimed_columns("(c.job).") + ", c.locked, c.slotted "
    "FROM jobq_claim_limited(%(queues)b::text[], %(worker_id)s, %(limit)s, %(scan)s, %(lock_base)s{freed}) AS c"
)
JOB_CLAIM_LIMITED = _CLAIM_LIMITED.format(freed="")

# JOB_CLAIM_LIMITED_PASSING: the same claim in the transaction of some outcomes, given
# the claims (job id, lease) whose slots those outcomes free (schema 30): the slots
# are deleted, and each one of a key passed on to the key's next due job in the same
# queue (jobs_pending_key_idx), claimed first; the claim of schema 25 takes the rest.
JOB_CLAIM_LIMITED_PASSING = _CLAIM_LIMITED.format(freed=", %(freed_ids)b::bigint[], %(freed_leases)b::bigint[]")

# LIMIT_RATE_OPENS_IN: seconds until the rate of one of some queues lets one more job
# start: the claim that made its starts in the window reach N leaves the window (a
# backward range of jobq_limit_starts_idx per rate-limited queue, its starts summed
# latest first; primary key probes of jobq_queues); NULL when none is full. Sent after
# a claim under limits (jobq.limits.claims), so that an idle worker whose due jobs wait
# for a rate looks again when the window opens, not on a doubling backoff.
LIMIT_RATE_OPENS_IN = (
    "SELECT extract(epoch FROM min(o.at) - clock_timestamp())::float8 FROM jobq_queues AS q, LATERAL ("
    "SELECT w.at + make_interval(secs => q.rate_seconds) AS at FROM (SELECT s.at, sum(s.n) OVER (ORDER BY s.at DESC) "
    "AS latest FROM jobq_limit_starts AS s WHERE s.scope = 'queue ' || q.name "
    "AND s.at > clock_timestamp() - make_interval(secs => q.rate_seconds)) AS w "
    "WHERE w.latest >= q.rate_count ORDER BY w.at DESC LIMIT 1) AS o "
    "WHERE q.name = ANY(%(queues)b::text[]) AND q.rate_count IS NOT NULL"
)

# LIMIT_SLOTS_RELEASE: the slots of some claims (job_id, lease of the claim: primary key
# of jobq_limit_slots), sent in the transaction of their outcome (jobq_limit_release).
LIMIT_SLOTS_RELEASE = "SELECT jobq_limit_release(%(ids)b::bigint[], %(leases)b::bigint[])"

# LIMIT_SLOTS_LOCK_GONE: the slots whose job is no longer in flight under the slot's
# lease (finished by an operator, given back by a reaper or after a reconnect, deleted)
# and whose advisory lock this session can take, i.e. whose holder's session is gone:
# a job cancelled while its handler runs keeps its slot until its run ends. The
# candidates are fixed first (MATERIALIZED), so no other job's lock is ever tried;
# the caller frees them (LIMIT_SLOTS_RELEASE) and then lets go of the locks.
LIMIT_SLOTS_LOCK_GONE = (
    "WITH gone AS MATERIALIZED (SELECT s.job_id, s.lease FROM jobq_limit_slots AS s WHERE NOT EXISTS "
    "(SELECT FROM jobs AS j WHERE j.id = s.job_id AND j.lease = s.lease AND j.status IN ('claimed', 'running'))) "
    "SELECT job_id, lease FROM gone WHERE pg_try_advisory_lock(%(lock_base)s | job_id)"
)

# LIMIT_STARTS_PRUNE: starts older than the longest period (an hour) count for no rate.
LIMIT_STARTS_PRUNE = "DELETE FROM jobq_limit_starts WHERE at < now() - interval '1 hour'"

# LIMIT_UPSERT: a rule on keys, created or replaced whole (primary key); returns when.
LIMIT_UPSERT = (
    "INSERT INTO jobq_limits AS l (pattern, concurrency, rate_count, rate_seconds, updated_by) "
    "VALUES (%(pattern)s, %(concurrency)s, %(rate_count)s, %(rate_seconds)s, %(actor)s) "
    "ON CONFLICT (pattern) DO UPDATE SET concurrency = excluded.concurrency, rate_count = excluded.rate_count, "
    "rate_seconds = excluded.rate_seconds, updated_at = now(), updated_by = excluded.updated_by RETURNING updated_at"
)

# LIMIT_DELETE: a rule removed (primary key); returns it if it existed.
LIMIT_DELETE = "DELETE FROM jobq_limits WHERE pattern = %(pattern)s RETURNING pattern"

# LIMIT_LIST: every rule with its use now: the slots of the keys it governs (those
# whose rule it is: jobq_limit_rule, over the keys that hold slots), how many distinct
# keys hold them, and its held jobs: due pending jobs of keys whose slots are all
# taken (a scan of the due pending jobs that carry a key, grouped by key; none at all
# while there is no rule: a one-time test before the scan).
LIMIT_LIST = (
    "WITH slots AS (SELECT concurrency_key, count(*) AS n FROM jobq_limit_slots "
    "WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key), "
    "due AS (SELECT concurrency_key, count(*) AS n FROM jobs "
    "WHERE status = 'pending' AND concurrency_key IS NOT NULL AND run_at <= now() "
    "AND EXISTS (SELECT FROM jobq_limits) GROUP BY concurrency_key), "
    "per_key AS (SELECT coalesce(s.concurrency_key, d.concurrency_key) AS key, coalesce(s.n, 0) AS slots, "
    "coalesce(d.n, 0) AS due FROM slots AS s FULL JOIN due AS d USING (concurrency_key)), "
    "per_rule AS (SELECT r.pattern, sum(k.slots) AS slots, count(*) FILTER (WHERE k.slots > 0) AS keys, "
    "sum(k.due) FILTER (WHERE r.concurrency IS NOT NULL AND k.slots >= r.concurrency) AS held "
    "FROM per_key AS k, LATERAL jobq_limit_rule(k.key) AS r GROUP BY r.pattern) "
    "SELECT l.pattern, l.concurrency, l.rate_count, l.rate_seconds, l.updated_at, l.updated_by, "
    "coalesce(u.slots, 0)::bigint, coalesce(u.keys, 0)::bigint, coalesce(u.held, 0)::bigint "
    "FROM jobq_limits AS l LEFT JOIN per_rule AS u USING (pattern) ORDER BY l.pattern"
)

# QUEUE_SET_LIMITS: a queue's limits (its row created if it has none); a limit whose
# set_* flag is false keeps its value. Returns the row's limits after the change.
QUEUE_SET_LIMITS = (
    "INSERT INTO jobq_queues AS q (name, concurrency, rate_count, rate_seconds, fair, limits_at, limits_by) "
    "VALUES (%(name)s, %(concurrency)s, %(rate_count)s, %(rate_seconds)s, coalesce(%(fair)s, false), now(), %(actor)s) "
    "ON CONFLICT (name) DO UPDATE SET "
    "concurrency = CASE WHEN %(set_concurrency)s THEN excluded.concurrency ELSE q.concurrency END, "
    "rate_count = CASE WHEN %(set_rate)s THEN excluded.rate_count ELSE q.rate_count END, "
    "rate_seconds = CASE WHEN %(set_rate)s THEN excluded.rate_seconds ELSE q.rate_seconds END, "
    "fair = CASE WHEN %(set_fair)s THEN excluded.fair ELSE q.fair END, "
    "limits_at = now(), limits_by = excluded.limits_by "
    "RETURNING name, concurrency, rate_count, rate_seconds, fair"
)

# QUEUE_LIST_LIMITS: the queues with a limit, each with its slots in use (the slots'
# queue index) and its due pending jobs (capped by %(cap)s: a range of the claim
# index) that wait while its slots are all taken.
QUEUE_LIST_LIMITS = (
    "SELECT q.name, q.concurrency, q.rate_count, q.rate_seconds, q.fair, "
    "(SELECT count(*) FROM jobq_limit_slots AS s WHERE s.queue = q.name) AS in_use, "
    "(SELECT count(*) FROM (SELECT FROM jobs WHERE status = 'pending' AND queue = q.name AND run_at <= now() "
    "LIMIT %(cap)s) AS d) AS due "
    "FROM jobq_queues AS q WHERE q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL OR q.fair ORDER BY q.name"
)
