"""The planner's statistics of jobs: whether they are stale or due, and ANALYZE, for the
partitioned table (which autovacuum never analyses) and for its live partition (whose
statistics a drained queue leaves empty).

Run by :mod:`jobq.store.partitions` (JOB_ANALYSIS_DUE, JOB_ANALYZE) and
:mod:`jobq.store.statistics` (JOB_LIVE_STATISTICS_STALE, JOB_LIVE_ANALYZE, also for a
worker that meets a burst; WORKFLOW_STATISTICS_STALE, WORKFLOW_TABLE_ANALYZE), for the
maintenance leader.
"""

from __future__ import annotations

# JOB_ANALYZE: statistics of the partitioned table itself (and of each partition),
# which autovacuum never takes for a partitioned table: the planner reads them for
# the statements that are not pruned to one partition (listings, GET by id).
# SKIP_LOCKED: a partition autovacuum is working on is left to it. Waiting for it
# cancelled autovacuum after deadlock_timeout (a second): in a soak with a partition a
# minute, its vacuum of jobs_live was cancelled four times in 16 minutes.
JOB_ANALYZE = "ANALYZE (SKIP_LOCKED) jobs"

# JOB_ANALYSIS_DUE: whether the partitioned table was never analysed (as far as the
# statistics collector knows: a crash forgets it) or last analysed over %(every)s
# seconds ago.
JOB_ANALYSIS_DUE = (
    "SELECT coalesce(max(last_analyze) < now() - make_interval(secs => %(every)s), true) "
    "FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
)

# JOB_LIVE_STATISTICS_STALE: whether the planner's count of jobs_live (pg_class.reltuples:
# -1 never analysed, 0 analysed empty) is %(factor)s times short of the jobs live now
# (the exact counters: a scan of job_counters, a small table), with at least
# %(min_rows)s of them. Never analysed, the planner's guess for the claim read every
# due job of the queue and sorted them all (23 ms a claim with 50,000 jobs waiting, 80
# ms with 200,000); analysed empty, a bitmap scan did the same (see
# CLAIM_SESSION_PLANNER), and other plans are guesses too until autovacuum's next look.
JOB_LIVE_STATISTICS_STALE = (
    "SELECT live.n >= %(min_rows)s AND live.n > %(factor)s * greatest(c.reltuples, 0) "
    "FROM pg_class AS c, (SELECT coalesce(sum(n), 0) AS n FROM job_counters "
    "WHERE name IN ('pending', 'claimed', 'running')) AS live WHERE c.oid = 'jobs_live'::regclass"
)
# JOB_LIVE_ANALYZE: by the leader, or by a worker that met a burst (jobq.daemon.worker.backlog);
# SKIP_LOCKED: an ANALYZE or VACUUM of jobs_live under way (another worker's, autovacuum's)
# is not waited for, and none is cancelled.
JOB_LIVE_ANALYZE = "ANALYZE (SKIP_LOCKED) jobs_live"

# WORKFLOW_TABLES: the tables a workflow's release and settlement read (schema 31).
WORKFLOW_TABLES = ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges")

# WORKFLOW_STATISTICS_STALE: of WORKFLOW_TABLES, those whose planner's count
# (pg_class.reltuples) is %(factor)s times short of the rows the statistics system counts
# live in them (n_live_tup, kept at each commit), with at least %(min_rows)s of them.
# Autovacuum may analyse them in the middle of a large workflow's enqueue and record
# them empty (none of the uncommitted rows seen); until its next look a minute later, a
# fan-in's settlement planned from that read every edge of the workflow for each batch
# of its parents (about a second a batch of 500 in a fan-in of 10,000).
WORKFLOW_STATISTICS_STALE = (
    "SELECT c.relname FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid "
    "WHERE c.oid = ANY(%(tables)s::regclass[]) "
    "AND s.n_live_tup >= %(min_rows)s AND s.n_live_tup > %(factor)s * greatest(c.reltuples, 0) "
    "ORDER BY c.relname"
)
# WORKFLOW_TABLE_ANALYZE: one of them (its name composed as an identifier), SKIP_LOCKED as
# JOB_LIVE_ANALYZE.
WORKFLOW_TABLE_ANALYZE = "ANALYZE (SKIP_LOCKED) {table}"
