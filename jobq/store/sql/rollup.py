"""The per-minute rollup (jobq_minutes, schema 9): what finished in each minute, per queue
and for all queues, with the percentiles of run time and start latency; written once a
minute by the maintenance leader, read by the dashboard's charts.

Run by :mod:`jobq.observe.rollup` (the leader's rollup and its retention, the charts'
reads). The failed runs of a minute come from the counters' samples
(:data:`jobq.store.sql.counters.COUNTER_SAMPLE_FAILED_BY_MINUTE`).
"""

from __future__ import annotations

# MINUTE_GET_LAST: the newest minute rolled up (its '' row is written with every minute:
# one probe of the primary key, backwards).
MINUTE_GET_LAST = "SELECT max(minute) FROM jobq_minutes WHERE queue = ''"

# JOB_FINISHED_BY_MINUTE: what finished in [%(start)s, %(end)s) per whole minute (UTC),
# per queue and for all queues together (queue ''): jobs done, dead and cancelled, and
# the p50/p95/p99 of run time (started -> completed) and start latency (run_at ->
# started) of the jobs done: twice, the second pair to be read on the '' rows. One
# range of jobs_completed_idx: the minutes' rows only, whatever the size of the table.
# JOB_FINISHED_BY_MINUTE_SAMPLED: the same, each percentile taken over every k-th job
# by id: k is %(every)s's entry for the queue (1 for a queue not in %(queues)s) in the
# first pair, %(every_all)s in the second; what is sorted is the sample. In the exact
# form both pairs are the same aggregates, which PostgreSQL computes once.
_ROLLUP_RUN = "greatest(extract(epoch FROM completed_at - started_at), 0)::float8"
_ROLLUP_LATENCY = "greatest(extract(epoch FROM started_at - run_at), 0)::float8"


def _finished_by_minute(queue_sample: str, all_sample: str) -> str:
    return (
        "SELECT date_trunc('minute', completed_at, 'UTC') AS minute, "
        "CASE WHEN GROUPING(queue) = 1 THEN '' ELSE queue END, "
        "count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead'), "
        "count(*) FILTER (WHERE status = 'cancelled'), "
        + ", ".join(
            f"percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY {value}) FILTER (WHERE {sample})"
            for sample in (queue_sample, all_sample)
            for value in (_ROLLUP_RUN, _ROLLUP_LATENCY)
        )
        + " FROM jobs WHERE completed_at >= %(start)s AND completed_at < %(end)s "
        "AND status IN ('done', 'dead', 'cancelled') "
        "GROUP BY GROUPING SETS ((date_trunc('minute', completed_at, 'UTC'), queue), "
        "(date_trunc('minute', completed_at, 'UTC')))"
    )


JOB_FINISHED_BY_MINUTE = _finished_by_minute("status = 'done'", "status = 'done'")
JOB_FINISHED_BY_MINUTE_SAMPLED = _finished_by_minute(
    "status = 'done' AND id %% coalesce((%(every)s::bigint[])[array_position(%(queues)s::text[], queue)], 1) = 0",
    "status = 'done' AND id %% %(every_all)s = 0",
)

# MINUTE_LIST_COMPLETED: the jobs done per queue ('' for all) in a minute rolled up.
MINUTE_LIST_COMPLETED = "SELECT queue, completed FROM jobq_minutes WHERE minute = %(minute)s"

# MINUTE_INSERT_IF_ABSENT: the rows of some minutes, from parallel arrays; a (queue,
# minute) already written (another leader, a restart) is left as it is (primary key).
MINUTE_INSERT_IF_ABSENT = (
    "INSERT INTO jobq_minutes (minute, queue, completed, failed, dead, cancelled, pending, running, "
    "run_p50, run_p95, run_p99, latency_p50, latency_p95, latency_p99) "
    "SELECT * FROM unnest(%(minutes)s::timestamptz[], %(queues)s::text[], %(completed)s::bigint[], "
    "%(failed)s::bigint[], %(dead)s::bigint[], %(cancelled)s::bigint[], %(pending)s::bigint[], "
    "%(running)s::bigint[], %(run_p50)s::float8[], %(run_p95)s::float8[], %(run_p99)s::float8[], "
    "%(latency_p50)s::float8[], %(latency_p95)s::float8[], %(latency_p99)s::float8[]) "
    "ON CONFLICT (queue, minute) DO NOTHING"
)

# MINUTE_DELETE_BEFORE: rows older than the retention (a seq scan of a small table).
MINUTE_DELETE_BEFORE = "DELETE FROM jobq_minutes WHERE minute < %(before)s"

# MINUTE_LIST_OF_QUEUE: one queue's minutes ('' for all queues) in [%(first)s,
# %(last)s], oldest first (one range of the primary key).
MINUTE_LIST_OF_QUEUE = (
    "SELECT minute, completed, failed, dead, cancelled, pending, running, run_p50, run_p95, run_p99, "
    "latency_p50, latency_p95, latency_p99 FROM jobq_minutes "
    "WHERE queue = %(queue)s AND minute >= %(first)s AND minute <= %(last)s ORDER BY minute"
)
