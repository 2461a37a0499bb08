"""Jobs read: one job by id; a listing's parts (its SELECT, count, filters, keyset
predicate and ORDER BY, which :mod:`jobq.jobs.ledger`, :mod:`jobq.jobs.filters` and
:mod:`jobq.jobs.operations` put together with ``psycopg.sql``); a filter's counts by
status; the recent failures and run times. No statement here takes a lock.

Run by :mod:`jobq.jobs.ledger` (get, list, cursors), :mod:`jobq.jobs.filters`
(JOB_LIST_FILTERS), :mod:`jobq.jobs.operations` (a dry run's count),
:mod:`jobq.observe.tallies` (the dashboard's counts by status),
:mod:`jobq.observe.inspection` (the recent failures) and :mod:`jobq.observe.metrics`
(the recent run times). The reads of jobs per queue are in
:mod:`jobq.store.sql.queues`, the exact depths in :mod:`jobq.store.sql.counters`.
"""

from __future__ import annotations

from jobq.store.sql.fragments import JOB_COLUMNS

# LISTING_SNAPSHOT: a listing's statements (its total, from the counters or counted, and
# its page) read one snapshot, so that the page a total bounds is that total's: a job
# added between the two is in neither (first in a transaction of its own).
LISTING_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

# JOB_GET: one row by primary key, no lock.
JOB_GET = "SELECT " + JOB_COLUMNS + " FROM jobs WHERE id = %(id)s"

# A listing reads the rows meeting a filter ({conditions}: JOB_LIST_FILTERS joined with AND,
# or TRUE) in two parts (schema 29): the rows outside flight, which the listing indexes
# hold (jobs_pending_created_idx and jobs_pending_type_created_idx on jobs_live, the
# finished partitions' jobs_created_idx, jobs_type_created_idx and jobs_dead_created_idx,
# jobs_waiting's own), and the rows in flight (claimed or running: at most what the
# workers hold), which only jobs_inflight_heartbeat_idx holds, so that a claim writes no
# entry in the listing indexes. Each part's WHERE spells its status as those indexes'
# predicates do: the planner uses a partial index only where the WHERE implies it.
_PARTS = ("status NOT IN ('claimed', 'running')", "status IN ('claimed', 'running')")
_MATCHING = "FROM jobs WHERE {conditions} AND <part>"


def _in_parts(select: str, joined_by: str = " UNION ALL ") -> str:
    """``select`` (its ``<part>`` in _MATCHING) for each part, each in parentheses."""
    return joined_by.join("(" + select.replace("<part>", part) + ")" for part in _PARTS)


# JOB_LIST_COUNT: how many rows match, no lock.
JOB_LIST_COUNT = "SELECT " + _in_parts("SELECT count(*) " + _MATCHING, " + ")
# JOB_LIST_COUNT_UP_TO: a listing's total counted no further than %(cap)s rows a part: a
# common tag's half a million rows are not all counted for a page (more than %(cap)s in
# all: more than the caller counts exactly).
JOB_LIST_COUNT_UP_TO = "SELECT count(*) FROM (" + _in_parts("SELECT " + _MATCHING + " LIMIT %(cap)s") + ") AS capped"
JOB_LIST_ORDER = " ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s"
# JOB_LIST_PAGE: a page newest first, no lock. Each part stops after %(first)s rows (the
# page's limit + offset): the rows outside flight along the listing indexes, merged in
# order, the in-flight ones sorted; then the two merged.
JOB_LIST_PAGE = (
    "SELECT * FROM ("
    + _in_parts("SELECT " + JOB_COLUMNS + " " + _MATCHING + " ORDER BY created_at DESC, id DESC LIMIT %(first)s")
    + ") AS page" + JOB_LIST_ORDER
)
# JOB_LIST_AFTER: the keyset predicate of a page after a cursor (jobq.jobs.cursors): rows older
# than the last one shown, in the listing's order. A row comparison on the trailing
# (created_at, id) of the listing indexes: an index condition, so a page deep in a
# million rows reads about a page of rows.
JOB_LIST_AFTER = "(created_at, id) < (%(after_created_at)s, %(after_id)s)"
# JOB_GET_CREATED_AT: where a listing starting after one job (?before=<id>) starts (jobs_pkey).
JOB_GET_CREATED_AT = "SELECT created_at FROM jobs WHERE id = %(id)s"
# JOB_LIST_FEW: a page of a filter that JOB_LIST_COUNT_UP_TO found few rows for: all of
# them first (MATERIALIZED: by the filter's own index, a rare tag's through
# jobs_tags_idx, ids' through jobs_pkey), then sorted. Without the fence the planner
# may walk jobs_created_idx newest first, expecting the page soon, and read the whole
# index for a rare tag whose frequency its statistics overestimate.
JOB_LIST_FEW = (
    "WITH matching AS MATERIALIZED (" + _in_parts("SELECT " + JOB_COLUMNS + " " + _MATCHING) + ") "
    "SELECT " + JOB_COLUMNS + " FROM matching" + JOB_LIST_ORDER
)

# JOB_LIST_FILTERS: the WHERE clauses of a filter (jobq.jobs.filters) by field name, for
# listings, dry runs and bulk operations; jobq.jobs.filters joins those given with AND. In
# a listing (JOB_LIST_PAGE) type walks the type's listing indexes, status 'dead'
# jobs_dead_created_idx; another status and queue filter the walk of the others (no full
# index on either, see 0001_jobs.sql);
# created_after and created_before bound whichever walk it is. tag can use
# jobs_tags_idx (GIN, partial: @> implies tags IS NOT NULL); ids jobs_pkey. error is
# an ILIKE pattern that jobq.jobs.filters makes from the substring, its wildcards escaped.
# schedule uses jobs_schedule_created_idx (partial: only scheduled jobs are in it).
JOB_LIST_FILTERS = {
    "status": "status = %(status)s",
    "type": "type = %(type)s",
    "queue": "queue = %(queue)s",
    "tag": "tags @> ARRAY[%(tag)s::text]",
    "schedule": "schedule = %(schedule)s",
    "ids": "id = ANY(%(ids)b::bigint[])",
    "created_after": "created_at > %(created_after)s",
    "created_before": "created_at < %(created_before)s",
    "error": "error ILIKE %(error)s",
}

# JOB_COUNT_BY_STATUS_UP_TO: how many of the first %(cap)s jobs of each part matching a
# filter ({conditions}) are in each status: exact when fewer match, else only a lower
# bound of the total (the filter's own index bounds the walk, as JOB_LIST_COUNT_UP_TO's).
JOB_COUNT_BY_STATUS_UP_TO = (
    "SELECT status, count(*) FROM (" + _in_parts("SELECT status " + _MATCHING + " LIMIT %(cap)s")
    + ") AS capped GROUP BY status"
)

# JOB_LIST_RECENT_FAILURES: jobs whose last run failed, latest first (jobs_failed_idx).
# A job with an error that never ran (a step cancelled with its dead parent named) has no
# heartbeat_at: no run of it failed, and DESC would put it first.
JOB_LIST_RECENT_FAILURES = (
    "SELECT id, type, queue, status, attempt, max_retries, error, heartbeat_at FROM jobs "
    "WHERE error IS NOT NULL AND heartbeat_at IS NOT NULL ORDER BY heartbeat_at DESC LIMIT %(limit)s"
)

# JOB_LIST_RECENT_RUN_TIMES: run time and start latency of the jobs finished done in the
# trailing window, the most recent %(limit)s at most (jobs_completed_idx, backwards).
JOB_LIST_RECENT_RUN_TIMES = (
    "SELECT queue, extract(epoch FROM completed_at - started_at)::float8, "
    "extract(epoch FROM started_at - run_at)::float8 FROM jobs "
    "WHERE completed_at > now() - make_interval(secs => %(window)s) AND status = 'done' "
    "ORDER BY completed_at DESC LIMIT %(limit)s"
)
