"""The partitions of the finished jobs (jobs_finished: a range partition per period and a
DEFAULT partition; the layout is schema 13's): list, create, attach, lock, uncount,
detach and drop them; and the retention of the finished jobs that no partition of
their own holds.

Run by :mod:`jobq.store.partitions` (the maintenance leader's partition duty),
:mod:`jobq.store.retention` (JOB_DELETE_FINISHED_BEFORE) and :mod:`jobq.store.migrate`
(LOCK_TIMEOUT_SET, each migration file's wait for its locks). The statistics of the
partitioned table are in :mod:`jobq.store.sql.statistics`.
"""

from __future__ import annotations

# The DDL that names a partition is here as psycopg.sql templates ({leaf}, {key}: names;
# {lo}, {hi}: bounds as literals, since DDL takes no parameters). Each runs under
# LOCK_TIMEOUT_SET in its transaction: DDL on jobs_finished queues behind the
# completions that hold it and every completion queues behind the DDL, so a wait is cut
# short and tried again at the next pass.

# FINISHED_PARTITION_LIST: the range partitions of jobs_finished, oldest first, with
# their bounds (the catalogue's text of each, read back as timestamptz in the same
# session); the DEFAULT partition is not among them. A scan of pg_inherits.
FINISHED_PARTITION_LIST = (
    r"SELECT c.relname, substring(b.bound FROM $$FROM \('([^']+)'\)$$)::timestamptz, "
    r"substring(b.bound FROM $$TO \('([^']+)'\)$$)::timestamptz "
    "FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
    "CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) AS b "
    "WHERE i.inhparent = 'jobs_finished'::regclass AND b.bound <> 'DEFAULT' ORDER BY 2"
)

# LOCK_TIMEOUT_SET: this transaction's lock_timeout (milliseconds, as text).
LOCK_TIMEOUT_SET = "SELECT set_config('lock_timeout', %(ms)s, true)"

# FINISHED_PARTITION_CREATE / _ID_KEY: a new partition, standalone first (no lock on
# jobs_finished), with its unique index on id (ids are unique per partition).
FINISHED_PARTITION_CREATE = "CREATE TABLE {leaf} (LIKE jobs_finished INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
FINISHED_PARTITION_ID_KEY = "CREATE UNIQUE INDEX {key} ON {leaf} (id)"

# FINISHED_DEFAULT_LOCK: the default partition, locked as ATTACH will lock it (ACCESS
# EXCLUSIVE: it checks that none of its rows belongs to the new range) before the
# latest of its rows in the range is read, so that no job lands there in between.
FINISHED_DEFAULT_LOCK = "LOCK TABLE jobs_finished_default IN ACCESS EXCLUSIVE MODE"

# FINISHED_DEFAULT_LAST_IN_RANGE: the latest completion in the default partition within
# [%(lo)s, %(hi)s) (jobs_completed_idx), where a new partition must start after.
FINISHED_DEFAULT_LAST_IN_RANGE = (
    "SELECT max(completed_at) FROM jobs_finished_default WHERE completed_at >= %(lo)s AND completed_at < %(hi)s"
)

# FINISHED_PARTITION_ATTACH: the new partition into jobs_finished (SHARE UPDATE
# EXCLUSIVE on jobs_finished: completions go on; its own indexes become the partitions
# of jobs_finished's, the missing ones are built, on an empty table).
FINISHED_PARTITION_ATTACH = "ALTER TABLE jobs_finished ATTACH PARTITION {leaf} FOR VALUES FROM ({lo}) TO ({hi})"

# FINISHED_PARTITION_LOCK: a partition whose range retention has passed, made read-only
# for this transaction (SHARE: only writers of that partition wait) before its rows are
# counted, so that the counts adjusted are the rows dropped.
FINISHED_PARTITION_LOCK = "LOCK TABLE {leaf} IN SHARE MODE"

# FINISHED_PARTITION_UNCOUNT: the depth counters less the partition's rows (DROP fires no
# trigger; the totals are left alone); returns how many rows it held.
FINISHED_PARTITION_UNCOUNT = (
    "WITH gone AS (SELECT queue, type, status, count(*) AS n FROM {leaf} GROUP BY queue, type, status), "
    "counted AS (INSERT INTO job_counters AS c (queue, type, name, slot, n) "
    "SELECT queue, type, status, jobq_counter_slot(), -n FROM gone ORDER BY queue, type, status "
    "ON CONFLICT (queue, type, name, slot) DO UPDATE SET n = c.n + excluded.n) "
    "SELECT coalesce(sum(n), 0)::bigint FROM gone"
)

# FINISHED_PARTITION_FORGET_KEYS: the 'always' keys of the partition's jobs, let go.
FINISHED_PARTITION_FORGET_KEYS = (
    "DELETE FROM job_idempotency_keys AS k USING {leaf} AS j "
    "WHERE j.unique_while = 'always' AND j.idempotency_key IS NOT NULL AND k.job_id = j.id"
)

# FINISHED_PARENT_LOCK: jobs_finished alone (ONLY: not its partitions), as DETACH takes
# it (ACCESS EXCLUSIVE), under a short LOCK_TIMEOUT_SET: every completion writes
# through it and queues behind the wait (jobq.store.partitions._lock_parent).
FINISHED_PARENT_LOCK = "LOCK TABLE ONLY jobs_finished IN ACCESS EXCLUSIVE MODE"

# FINISHED_PARTITION_DETACH / _DROP: the partition out of jobs_finished and gone.
# DETACH in the transaction that adjusted the counters (ACCESS EXCLUSIVE on
# jobs_finished for an instant, under LOCK_TIMEOUT_SET): DETACH CONCURRENTLY cannot run
# in a transaction, nor beside a DEFAULT partition.
FINISHED_PARTITION_DETACH = "ALTER TABLE jobs_finished DETACH PARTITION {leaf}"
FINISHED_PARTITION_DROP = "DROP TABLE {leaf}"

# JOB_DELETE_FINISHED_BEFORE: retention of the finished jobs that no partition of their
# own holds (jobs_finished_default: jobs converted by schema 13, jobs finished while no
# partition covered the hour); whole partitions go by FINISHED_PARTITION_DETACH. Up to
# %(batch)s rows finished before the cut-off and before %(below)s (the oldest range
# partition's start, so that only the default partition is read: partition pruning),
# oldest first (jobs_completed_idx), skipping row-locked ones, so that each statement
# is short and holds few locks. Counters drop the depth, keep the totals; the delete
# trigger lets go of the jobs' 'always' keys.
_FINISHED_BEFORE = (
    "status IN ('done', 'failed', 'dead', 'cancelled') "
    "AND completed_at < least(now() - make_interval(secs => %(older_than)s), %(below)s::timestamptz)"
)
JOB_DELETE_FINISHED_BEFORE = (
    "DELETE FROM jobs WHERE " + _FINISHED_BEFORE + " AND id IN (SELECT id FROM jobs WHERE " + _FINISHED_BEFORE + " "
    "ORDER BY completed_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"
)
