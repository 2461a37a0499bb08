"""Jobs written by an enqueue: one row, many rows from parallel arrays, or many rows by
COPY under ids reserved first; and the reads an enqueue makes after an insert that met
a held idempotency key (the key's holders) or a lost connection (the jobs by id).

Run by :mod:`jobq.jobs.submit` (:func:`jobq.enqueue`, :func:`jobq.enqueue_many`), with
:mod:`jobq.jobs.copy_rows` making JOB_COPY's binary rows. A schedule's jobs go in by
:mod:`jobq.store.sql.schedules`, an operator's retries and replays by
:mod:`jobq.store.sql.control` and :mod:`jobq.store.sql.dead_letters`.
"""

from __future__ import annotations

from jobq.store.sql.fragments import JOB_COLUMNS, KEYED_INSERT, KEYED_INSERT_COLUMNS, LIVE
from jobq.store.sql.workers import WORKER_TAKE_WAITING

# KEY_HELD: a live row (jobs_live) holds its idempotency key now: always ('always'),
# while pending, claimed or running ('active'), while pending ('pending'). Spelt exactly
# as jobs_key_held_idx's predicate (migrations 0008, 0013), so that a lookup of holders
# scans that index. A finished job of the scope 'always' holds its key through its row
# in job_idempotency_keys (schema 13: no unique index spans partitions).
KEY_HELD = (
    "idempotency_key IS NOT NULL AND (unique_while = 'always' OR status = 'pending' "
    "OR (unique_while = 'active' AND status IN ('claimed', 'running')))"
)

# The one row of JOB_INSERT and JOB_INSERT_DEBOUNCED, but for its run_at.
_ONE_ROW = (
    "SELECT %(type)s, %(queue)s, %(payload)s::jsonb, %(priority)s::smallint, %(max_retries)s::int, "
    "{run_at}, %(idempotency_key)s::text AS idempotency_key, %(tags)b::text[], "
    "%(unique_while)s::text, %(concurrency_key)s::text"
)

# JOB_INSERT: one row; a key held by another job (see KEYED_INSERT) makes it insert
# and return nothing, so the caller reads that job instead.
JOB_INSERT = KEYED_INSERT.format(
    columns=KEYED_INSERT_COLUMNS + ", concurrency_key",
    rows=_ONE_ROW.format(run_at="coalesce(%(run_at)s, now())"),
    returning=JOB_COLUMNS,
)

# JOB_INSERT_UNKEYED: one row without an idempotency key: a plain INSERT (no key can be
# held, so no test of job_idempotency_keys and no ON CONFLICT), returning what the
# caller cannot know (jobq.jobs.submit builds the rest): the id, the run_at and
# created_at defaults, and the traceparent the session's setting gave it. The enqueue
# of one job is the start of the wake-up's path: 0.38 ms a round trip against 0.43 for
# JOB_INSERT with all its columns returned (benchmark/README.md, "The wake-up's triggers").
_INSERT_UNKEYED = (
    "INSERT INTO jobs (" + KEYED_INSERT_COLUMNS + ", concurrency_key{handed_columns}) "
    "SELECT r.*{handed} FROM (" + _ONE_ROW.format(run_at="coalesce(%(run_at)s, now())") + ") AS r{taken} "
    "RETURNING id, run_at, created_at, traceparent{handed_returned}"
)
JOB_INSERT_UNKEYED = _INSERT_UNKEYED.format(handed_columns="", handed="", taken="", handed_returned="")

# JOB_INSERT_HANDED: JOB_INSERT_UNKEYED in a transaction of its own (schema 28), handed
# to a waiting worker if one can take it; returns also that worker and the lease (NULL
# when the job went in pending). A worker whose last claim found nothing has
# waiting_since set on its row (JOB_CLAIM's flag); of those that serve the job's queue,
# the one waiting longest is taken (row lock, SKIP LOCKED: one enqueue a worker, none
# waits on another), its flag cleared, and the job goes in claimed for it under a new
# lease; a notification on jobq_hand_channel() ('<id> <lease> <worker>', sent at commit)
# tells it. Only a job due now, without a concurrency key (rules on keys are the
# claim's), of a queue neither paused nor limited (jobq_queues' row, one primary-key
# probe), while jobq.notify is not 'off'; any other goes in pending, as does every job
# while no worker waits (a seq scan of workers: a table of a row per worker process).
# Never in a caller's transaction (jobq.jobs.submit): the worker's row would stay locked,
# and its heartbeat wait, for as long as that transaction.
JOB_INSERT_HANDED = "WITH taken AS (" + WORKER_TAKE_WAITING + "), inserted AS (" + _INSERT_UNKEYED.format(
    handed_columns=", status, worker_id, lease, claimed_at, heartbeat_at",
    handed=", CASE WHEN t.id IS NULL THEN 'pending' ELSE 'claimed' END, t.id, "
    "CASE WHEN t.id IS NOT NULL THEN nextval('jobs_lease_seq') END, "
    "CASE WHEN t.id IS NOT NULL THEN now() END, CASE WHEN t.id IS NOT NULL THEN now() END",
    taken=" LEFT JOIN taken AS t ON true",
    handed_returned=", worker_id, lease",
) + "), told AS (SELECT count(pg_notify(jobq_hand_channel(), id || ' ' || lease || ' ' || worker_id)) AS n " \
    "FROM inserted WHERE worker_id IS NOT NULL) " \
    "SELECT i.id, i.run_at, i.created_at, i.traceparent, i.worker_id, i.lease FROM inserted AS i, told"

# JOB_INSERT_DEBOUNCED: JOB_INSERT of a debounced job (jobq.jobs.debounce): due
# %(debounce)s seconds from now, on the database's clock, or %(max_wait)s if that is
# shorter (the cap JOB_DEBOUNCE_IF_PENDING keeps, from the same created_at).
JOB_INSERT_DEBOUNCED = KEYED_INSERT.format(
    columns=KEYED_INSERT_COLUMNS + ", concurrency_key",
    rows=_ONE_ROW.format(
        run_at="now() + make_interval(secs => least(%(debounce)s::float8, coalesce(%(max_wait)s::float8, %(debounce)s)))"
    ),
    returning=JOB_COLUMNS,
)

# JOB_DEBOUNCE_IF_PENDING: the pending job holding a key in the scope 'pending'
# (jobs_key_held_idx, its predicate spelt as KEY_HELD), given the new payload and due
# %(debounce)s seconds from now, but never later than %(max_wait)s seconds after its
# first enqueue (its created_at). Guarded by status: a job claimed meanwhile is not
# touched (the caller inserts a new one). The row lock orders concurrent debounces.
JOB_DEBOUNCE_IF_PENDING = (
    "UPDATE jobs SET payload = %(payload)s::jsonb, run_at = CASE WHEN %(max_wait)s::float8 IS NULL "
    "THEN now() + make_interval(secs => %(debounce)s) ELSE least(now() + make_interval(secs => %(debounce)s), "
    "created_at + make_interval(secs => %(max_wait)s)) END "
    "WHERE " + LIVE + " AND idempotency_key = %(idempotency_key)s AND " + KEY_HELD + " "
    "AND status = 'pending' AND unique_while = 'pending' RETURNING " + JOB_COLUMNS
)

# JOB_RESERVE_IDS: the transaction's timestamp (now(), what the column defaults use)
# and n ids from the identity sequence, so that the rows can then go in by COPY. The
# sequence is looked up once (an InitPlan), not once per id: 0.6 us an id, not 3.2.
JOB_RESERVE_IDS = (
    "SELECT now(), array(SELECT nextval((SELECT pg_get_serial_sequence('jobs', 'id')::regclass)) "
    "FROM generate_series(1, %(n)s))"
)

# JOB_COPY: many rows without idempotency keys, in COPY's binary format (made by
# jobq.jobs.copy_rows), with the reserved ids and the reservation's timestamp as created_at;
# the statement-level trigger counts them and sends one wake-up per queue.
# JOB_COPY_WITH_TAGS: the same with tags, when some of the rows have them.
JOB_COPY = "COPY jobs (id, type, queue, payload, priority, max_retries, run_at, created_at) FROM STDIN (FORMAT BINARY)"
JOB_COPY_WITH_TAGS = (
    "COPY jobs (id, type, queue, payload, priority, max_retries, run_at, created_at, tags) FROM STDIN (FORMAT BINARY)"
)
# JOB_COPY_WITH_KEYS: the same with tags and concurrency keys, when some rows have keys.
JOB_COPY_WITH_KEYS = (
    "COPY jobs (id, type, queue, payload, priority, max_retries, run_at, created_at, tags, concurrency_key) "
    "FROM STDIN (FORMAT BINARY)"
)

# JOB_INSERT_MANY: many rows, some with idempotency keys, from parallel arrays in one
# statement; returns what the caller cannot know (id, run_at and created_at defaults).
# Same idempotency rule as JOB_INSERT. Each job's tags travel as one array literal
# (tag arrays differ in length, and a PostgreSQL array of arrays cannot).
JOB_INSERT_MANY = KEYED_INSERT.format(
    columns=KEYED_INSERT_COLUMNS + ", concurrency_key",
    rows="SELECT type, queue, payload, priority, max_retries, coalesce(run_at, now()), idempotency_key, "
    "tags::text[], unique_while, concurrency_key FROM unnest(%(types)b::text[], %(queues)b::text[], "
    "%(payloads)b::jsonb[], %(priorities)b::smallint[], %(max_retries)b::int[], %(run_ats)b::timestamptz[], "
    "%(idempotency_keys)b::text[], %(tags)b::text[], %(unique_whiles)b::text[], %(concurrency_keys)b::text[]) "
    "AS j(type, queue, payload, priority, max_retries, run_at, idempotency_key, tags, unique_while, concurrency_key)",
    returning="id, idempotency_key, run_at, created_at",
)

# JOB_INSERT_RESERVED: many rows without idempotency keys, under ids reserved for them
# (JOB_RESERVE_IDS) so that their inserter knows them before it sends this, from
# parallel arrays in one statement; all or nothing (an id already stored raises on
# jobs_live_pkey). Guarded by the sequence: inserts nothing if the highest id (last_id) is
# above what the sequence has handed out, i.e. it was restarted (TRUNCATE ... RESTART
# IDENTITY) since the reservation and would hand those ids out again. Returns the
# defaults the caller cannot know. Tags as in JOB_INSERT_MANY. Each job's traceparent is
# given (the grouped POST /jobs: each request's own), never the session's default.
JOB_INSERT_RESERVED_ROWS = (
    "INSERT INTO jobs (id, type, queue, payload, priority, max_retries, run_at, tags, traceparent, concurrency_key) "
    "SELECT id, type, queue, payload, priority, max_retries, coalesce(run_at, now()), tags::text[], traceparent, concurrency_key "
    "FROM unnest(%(ids)b::bigint[], %(types)b::text[], %(queues)b::text[], %(payloads)b::jsonb[], "
    "%(priorities)b::smallint[], %(max_retries)b::int[], %(run_ats)b::timestamptz[], %(tags)b::text[], "
    "%(traceparents)b::text[], %(concurrency_keys)b::text[]) "
    "AS j(id, type, queue, payload, priority, max_retries, run_at, tags, traceparent, concurrency_key) "
)
JOB_INSERT_RESERVED = JOB_INSERT_RESERVED_ROWS + (
    "WHERE %(last_id)s::bigint <= (SELECT pg_sequence_last_value(pg_get_serial_sequence('jobs', 'id')::regclass)) "
    "RETURNING id, run_at, created_at"
)

# JOB_INSERT_RESERVED_IF_ABSENT: JOB_INSERT_RESERVED sent again after its connection was
# lost in flight: a row whose id is already stored is left alone (ON CONFLICT on
# jobs_live_pkey, the only unique index these rows without keys can meet, after waiting
# for its inserter if that is still in flight) and not returned, so each job is stored
# once whatever the lost attempt did.
JOB_INSERT_RESERVED_IF_ABSENT = JOB_INSERT_RESERVED_ROWS + "ON CONFLICT DO NOTHING RETURNING id, run_at, created_at"

# JOB_GET_BY_IDS: the jobs with some ids (each partition's id index), no lock: those an
# earlier JOB_INSERT_RESERVED_IF_ABSENT stored; a workflow's steps' jobs (jobq.workflows.runs).
JOB_GET_BY_IDS = "SELECT " + JOB_COLUMNS + " FROM jobs WHERE id = ANY(%(ids)b::bigint[])"

# JOB_GET_KEY_HOLDERS: the jobs holding some keys now: live ones in their scope
# (jobs_key_held_idx), finished ones of the scope 'always' (job_idempotency_keys, then
# one probe per partition); a key whose job left its scope since the insert that met it
# has none.
JOB_GET_KEY_HOLDERS = (
    "SELECT " + JOB_COLUMNS + " FROM jobs WHERE " + LIVE + " AND idempotency_key = ANY(%(keys)b::text[]) AND "
    + KEY_HELD + " UNION ALL SELECT " + JOB_COLUMNS + " FROM jobs WHERE NOT (" + LIVE + ") AND id IN "
    "(SELECT job_id FROM job_idempotency_keys WHERE idempotency_key = ANY(%(keys)b::text[]))"
)
