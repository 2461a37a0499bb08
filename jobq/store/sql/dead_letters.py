"""Dead letters (dead_letter_jobs: the jobs that ran out of retries, written by
:data:`jobq.store.sql.outcomes.JOB_FAIL_IF_LEASED`) and their groups
(jobq_dead_letter_groups: by type and error signature, kept by triggers, migration
0005): get, list, replay, discard, count the waiting ones; and the retention of old
letters.

Run by :mod:`jobq.jobs.dead_letters` (letters and groups), :mod:`jobq.jobs.operations`
(a group's replay and discard, chunk by chunk), :mod:`jobq.observe.inspection` and
:mod:`jobq.observe.metrics` (the waiting letters) and :mod:`jobq.store.retention`
(DEAD_LETTER_DELETE_DIED_BEFORE), and by :mod:`jobq.jobs.dead_letters` for
:mod:`jobq.contrib.sentry` (DEAD_LETTER_SIGNATURE_OF). The retry of a dead job by its id is
:data:`jobq.store.sql.control.JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY`.
"""

from __future__ import annotations

from jobq.store.sql.fragments import DEAD_LETTER_COLUMNS, JOB_COLUMNS

# DEAD_LETTER_SIGNATURE_OF: the signature and group id a dead letter of this type and
# error gets (what dead_letter_jobs_sign computes, migration 0005): for an error tracker's
# grouping (jobq.contrib.sentry). Pure: no table, no lock.
DEAD_LETTER_SIGNATURE_OF = (
    "SELECT s.signature, left(md5(%(type)s || E'\\n' || s.signature), 16) "
    "FROM (SELECT jobq_error_signature(%(error)s) AS signature) AS s"
)

# DEAD_LETTER_GET: one row by primary key.
DEAD_LETTER_GET = "SELECT " + DEAD_LETTER_COLUMNS + " FROM dead_letter_jobs WHERE id = %(id)s"

# DEAD_LETTER_LIST: newest first (dead_letter_jobs_died_idx, or _type_died_idx with a
# type filter), no lock; jobq.jobs.dead_letters adds the filter (with psycopg.sql).
DEAD_LETTER_LIST_SELECT = "SELECT " + DEAD_LETTER_COLUMNS + " FROM dead_letter_jobs"
DEAD_LETTER_LIST_COUNT = "SELECT count(*) FROM dead_letter_jobs"
DEAD_LETTER_LIST_ORDER = " ORDER BY died_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s"

# DEAD_LETTER_LIST_FILTER_TYPE: the WHERE clause of a listing of one type
# (dead_letter_jobs_type_died_idx).
DEAD_LETTER_LIST_FILTER_TYPE = "type = %(type)s"

# DEAD_LETTER_REPLAY_IF_NOT_REPLAYED: a new pending job from a dead-letter row (with the
# original job's tags), recorded on that row and on the original job (retried_as, if
# retention has not deleted it), in one statement; the row lock (FOR UPDATE) and the
# replayed_at guard make a second replay find nothing.
DEAD_LETTER_REPLAY_IF_NOT_REPLAYED = (
    "WITH dl AS (SELECT * FROM dead_letter_jobs WHERE id = %(id)s AND replayed_at IS NULL FOR UPDATE), "
    "job AS (INSERT INTO jobs (type, queue, payload, priority, max_retries, tags) "
    "SELECT type, queue, payload, priority, max_retries, (SELECT tags FROM jobs WHERE jobs.id = dl.original_id) "
    "FROM dl RETURNING " + JOB_COLUMNS + "), "
    "mark AS (UPDATE dead_letter_jobs AS d SET replayed_at = now(), replayed_as = job.id "
    "FROM job WHERE d.id = %(id)s), "
    "original AS (UPDATE jobs AS o SET retried_as = job.id FROM dl, job "
    "WHERE o.id = dl.original_id AND o.retried_as IS NULL) "
    "SELECT " + JOB_COLUMNS + " FROM job"
)

# DEAD_LETTER_GET_REPLAYED_AS: why a replay found nothing (absent, or replayed as which job).
# DEAD_LETTER_GET_GROUP_OF_JOB: the letter a dead job left and its group (the unique
# index on original_id).
DEAD_LETTER_GET_GROUP_OF_JOB = "SELECT id, group_id FROM dead_letter_jobs WHERE original_id = %(job_id)s"

DEAD_LETTER_GET_REPLAYED_AS = "SELECT replayed_at IS NOT NULL, replayed_as FROM dead_letter_jobs WHERE id = %(id)s"

# DEAD_LETTER_DELETE: discard one dead-letter row for good.
DEAD_LETTER_DELETE = "DELETE FROM dead_letter_jobs WHERE id = %(id)s RETURNING id"

# DEAD_LETTER_COUNT_WAITING: dead letters not replayed (dead_letter_jobs_waiting_idx).
DEAD_LETTER_COUNT_WAITING = "SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL"

# DEAD_LETTER_LIST_WAITING: the latest dead letters not replayed (same index).
DEAD_LETTER_LIST_WAITING = (
    "SELECT id, original_id, type, queue, attempts, error, died_at FROM dead_letter_jobs "
    "WHERE replayed_at IS NULL ORDER BY died_at DESC LIMIT %(limit)s"
)

# DEAD_LETTER_COUNT_WAITING_BY_QUEUE: dead letters not replayed, per queue
# (dead_letter_jobs_waiting_idx).
DEAD_LETTER_COUNT_WAITING_BY_QUEUE = (
    "SELECT queue, count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL GROUP BY queue"
)

# DEAD_LETTER_DELETE_DIED_BEFORE: retention of dead letters (JOBQ_DEAD_LETTER_RETENTION),
# up to %(batch)s of them, oldest first (dead_letter_jobs_died_idx, backwards),
# replayed or not; the group triggers keep the groups' counts.
DEAD_LETTER_DELETE_DIED_BEFORE = (
    "DELETE FROM dead_letter_jobs WHERE id IN (SELECT id FROM dead_letter_jobs "
    "WHERE died_at < now() - make_interval(secs => %(older_than)s) ORDER BY died_at LIMIT %(batch)s "
    "FOR UPDATE SKIP LOCKED)"
)

# DEAD_LETTER_REPLAY_IF_WAITING: a group replay's chunk: a new pending job for each
# letter of some ids not replayed yet (the letter's fields, the original job's tags),
# the letter marked replayed as it and the original job (if retention has not deleted
# it) retried as it, all in one statement, the new ids taken first (nextval). Letters
# locked in id order skipping held ones (SKIP LOCKED); the originals' rows are then
# locked by the update (a job retry takes a job, then skips a held letter: no cycle).
DEAD_LETTER_REPLAY_IF_WAITING = (
    "WITH d AS MATERIALIZED (SELECT id, original_id, type, queue, payload, priority, max_retries FROM dead_letter_jobs "
    "WHERE id = ANY(%(ids)b::bigint[]) AND replayed_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED), "
    "src AS MATERIALIZED (SELECT d.*, nextval(pg_get_serial_sequence('jobs', 'id')) AS new_id, "
    "(SELECT tags FROM jobs WHERE jobs.id = d.original_id) AS tags FROM d), "
    "created AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, tags) "
    "SELECT new_id, type, queue, payload, priority, max_retries, tags FROM src ORDER BY new_id), "
    "letters AS (UPDATE dead_letter_jobs AS l SET replayed_at = now(), replayed_as = src.new_id "
    "FROM src WHERE l.id = src.id), "
    "originals AS (UPDATE jobs AS o SET retried_as = src.new_id FROM src "
    "WHERE o.id = src.original_id AND o.retried_as IS NULL) "
    "SELECT id, new_id FROM src"
)

# DEAD_LETTER_DISCARD_IF_WAITING: a group discard's chunk: delete the letters of some
# ids not replayed, locked in id order, skipping held ones (SKIP LOCKED).
DEAD_LETTER_DISCARD_IF_WAITING = (
    "WITH target AS (SELECT id FROM dead_letter_jobs WHERE id = ANY(%(ids)b::bigint[]) AND replayed_at IS NULL "
    "ORDER BY id FOR UPDATE SKIP LOCKED) "
    "DELETE FROM dead_letter_jobs AS d USING target WHERE d.id = target.id RETURNING d.id"
)

# Groups (jobq.jobs.dead_letters.groups; the groups are kept by triggers, 0005)

# DEAD_LETTER_GROUP_LIST_WAITING: groups with letters waiting, newest last_seen first
# (jobq_dead_letter_groups_waiting_idx, partial on count > 0; id breaks ties); never a
# scan of the dead letters themselves.
DEAD_LETTER_GROUP_LIST_WAITING = (
    "SELECT id, type, signature, count, first_seen, last_seen, example_id FROM jobq_dead_letter_groups "
    "WHERE count > 0 ORDER BY last_seen DESC, id LIMIT %(limit)s"
)

# DEAD_LETTER_GROUP_GET: one group (primary key), waiting or not.
DEAD_LETTER_GROUP_GET = (
    "SELECT id, type, signature, count, first_seen, last_seen, example_id FROM jobq_dead_letter_groups WHERE id = %(id)s"
)

# DEAD_LETTER_GROUP_EXISTS: whether a group of dead letters is known (its primary key).
DEAD_LETTER_GROUP_EXISTS = "SELECT EXISTS (SELECT FROM jobq_dead_letter_groups WHERE id = %(id)s)"

# DEAD_LETTER_GROUP_COUNT_WAITING: a group's letters not replayed (the triggers keep it).
DEAD_LETTER_GROUP_COUNT_WAITING = "SELECT count FROM jobq_dead_letter_groups WHERE id = %(id)s"

# DEAD_LETTER_LIST_OF_GROUP: the waiting letters of one group, newest first
# (dead_letter_jobs_group_waiting_idx, backwards).
DEAD_LETTER_LIST_OF_GROUP = (
    "SELECT " + DEAD_LETTER_COLUMNS + " FROM dead_letter_jobs WHERE group_id = %(group_id)s AND replayed_at IS NULL "
    "ORDER BY id DESC LIMIT %(limit)s"
)
