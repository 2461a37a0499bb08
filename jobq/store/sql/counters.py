"""The counters (job_counters: exact depths and monotonic totals per queue, type and name,
in one slot per jobq session, kept by the jobs' triggers) and their samples
(job_counter_samples: the maintenance leader's snapshots that rates are taken from).

Run by :mod:`jobq.jobs.ledger` and :mod:`jobq.observe.tallies` (COUNTER_LIST),
:mod:`jobq.jobs.submit` (the admission check), :mod:`jobq.jobs.leases` (COUNTER_ADD),
:mod:`jobq.store.connections` (a session's slot), :mod:`jobq.observe.samples` (taking
and pruning samples), :mod:`jobq.observe.metrics` (the baseline of a rate) and
:mod:`jobq.observe.rollup` (the failed runs of a minute).
"""

from __future__ import annotations

# COUNTER_LIST: exact depth per (queue, type, status) and monotonic totals, summed over
# the slots of job_counters (applications' 0..15, one per jobq session from 16: a small
# table, no jobs scan).
COUNTER_LIST = "SELECT queue, type, name, sum(n)::bigint FROM job_counters GROUP BY queue, type, name"

# COUNTER_GET_PENDING: the admission-control check; same table.
COUNTER_GET_PENDING = "SELECT coalesce(sum(n), 0)::bigint FROM job_counters WHERE name = 'pending'"

# COUNTER_ADD: an event that changes no job row (a reclaim, a timeout, a rejected
# stale write), added to this session's slot (jobq_counter_slot(), as the triggers do).
COUNTER_ADD = (
    "INSERT INTO job_counters AS c (queue, type, name, slot, n) "
    "VALUES (%(queue)s, %(type)s, %(name)s, jobq_counter_slot(), %(n)s) "
    "ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n"
)

# COUNTER_SLOT_TAKE: a jobq session's own counter slot, right after it connects: the
# lowest from 16 up that no other session holds, kept by a session advisory lock (the
# two-integer key (high word of %(lock_base)s, slot), apart from the jobs' keys) until
# the connection closes, and set as jobq.counter_slot for the triggers. An
# application's open transaction holds only rows of slots 0..15, so a worker never
# waits on one, nor on another jobq session.
COUNTER_SLOT_TAKE = "SELECT jobq_counter_slot_take(%(lock_base)s)"

# COUNTER_SAMPLE_TAKE: the leader's snapshot of every total (job_counters is small),
# plus one marker row, so that a sample of a queue with no totals yet still exists
# (a rate over the window then counts everything since it).
COUNTER_SAMPLE_TAKE = (
    "INSERT INTO job_counter_samples (at, queue, type, name, n) "
    "SELECT now(), queue, type, name, sum(n) FROM job_counters WHERE right(name, 6) = '_total' "
    "GROUP BY queue, type, name "
    "UNION ALL SELECT now(), '', '', 'sample', 0"
)

# COUNTER_SAMPLE_PRUNE: samples older than the longest window anyone asks for.
COUNTER_SAMPLE_PRUNE = "DELETE FROM job_counter_samples WHERE at < now() - make_interval(secs => %(keep_seconds)s)"

# COUNTER_SAMPLE_BASELINE: the totals of the newest sample at least %(window)s seconds
# old (the oldest sample while the history is shorter), with its age in seconds.
COUNTER_SAMPLE_BASELINE = (
    "WITH base AS (SELECT coalesce(max(at) FILTER (WHERE at <= now() - make_interval(secs => %(window)s)), "
    "min(at)) AS at FROM job_counter_samples) "
    "SELECT s.queue, s.name, sum(s.n)::bigint, extract(epoch FROM now() - base.at)::float8 "
    "FROM job_counter_samples AS s JOIN base ON s.at = base.at GROUP BY s.queue, s.name, base.at"
)

# COUNTER_SAMPLE_FAILED_BY_MINUTE: failed runs per minute and queue: failed_runs_total
# at the minute's newest sample minus at the newest sample before the minute (a minute
# without a sample, or without one before it, has none). Probes of the samples'
# primary key (at, ...): a quarter of an hour of samples at most.
COUNTER_SAMPLE_FAILED_BY_MINUTE = (
    "SELECT m.minute, s.queue, greatest(coalesce(sum(s.n) FILTER (WHERE s.at = cur.at), 0) "
    "- coalesce(sum(s.n) FILTER (WHERE s.at = prev.at), 0), 0)::bigint "
    "FROM unnest(%(minutes)s::timestamptz[]) AS m(minute) "
    "CROSS JOIN LATERAL (SELECT max(at) AS at FROM job_counter_samples "
    "WHERE at >= m.minute AND at < m.minute + interval '1 minute') AS cur "
    "CROSS JOIN LATERAL (SELECT max(at) AS at FROM job_counter_samples WHERE at < m.minute) AS prev "
    "JOIN job_counter_samples AS s ON s.at IN (cur.at, prev.at) AND s.name = 'failed_runs_total' "
    "GROUP BY m.minute, s.queue"
)
