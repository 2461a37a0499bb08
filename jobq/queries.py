"""jobq's DML, as named constants, and the modules that execute it.

What is here: enqueueing, reading, cancelling, retrying, claiming and recording the
outcome of jobs; bulk operations and their chunks; the reaper's, retention's and the
maintenance leader's statements; dead letters and their groups; worker rows; paused
queues; the per-session counters and their samples; the reads behind ``jobq
inspect``, the metrics and the readiness ping; the record of applied migrations; and
the advisory-lock calls (a job's lock rides in its claim and outcome
statements, the leader's and the migrations' stand alone).

DDL lives in the numbered files of ``jobq/store/migrations``, with one exception:
``jobq.store.migrate.MIGRATIONS_TABLE_CREATE``, which creates ``jobq_migrations`` itself,
because the table that records migrations cannot be created by a migration.

Names are Entity + Verb + Qualifier; a write says in its name what it is guarded by.
Each constant has a comment on the lock it takes, the index it uses and its guard.
Values always travel as placeholders. A few constants are fragments (a listing's
SELECT, count, filters and ORDER BY; a bulk operation's chunk) that :mod:`jobq.jobs.ledger`,
:mod:`jobq.jobs.filters`, :mod:`jobq.jobs.operations` and :mod:`jobq.jobs.dead_letters` put together
with ``psycopg.sql``. The advisory key of job ``id`` is ``%(lock_base)s | id`` where
``lock_base`` is the namespace shifted into the high 16 bits (see :mod:`jobq.store.locks`).

Who executes them: the library's modules (:mod:`jobq.jobs.submit`, :mod:`jobq.jobs.ledger`,
:mod:`jobq.jobs.control`, :mod:`jobq.jobs.operations`, :mod:`jobq.jobs.audit`, :mod:`jobq.jobs.dead_letters`,
:mod:`jobq.jobs.leases`, :mod:`jobq.store.retention`, :mod:`jobq.observe.metrics`, :mod:`jobq.observe.samples`, :mod:`jobq.observe.rollup`,
:mod:`jobq.observe.inspection`, :mod:`jobq.jobs.queues`, :mod:`jobq.store.migrate`, and :mod:`jobq.store.connections` for the
ping) and the daemon's
(:mod:`jobq.daemon.presence`, :mod:`jobq.daemon.maintenance.reaper`,
:mod:`jobq.daemon.maintenance.duties`, and :mod:`jobq.daemon.worker.session` for its counter
slot). Routes, the CLI and everything else call those modules; tests may run a
statement directly to set up a row or to ``EXPLAIN`` it.
"""

from __future__ import annotations

from jobq.spec import MAX_PRIORITY, MIN_PRIORITY

# Array parameters go in binary (%(name)b): a text array literal costs the client a
# regular-expression escape of every element (40 % of the Python time of a 1,000-job
# enqueue_many, 8 % of a worker's).

# Exactly the fields of jobq.job.Job and of jobq.job.DeadLetter, in order, for
# class_row (tests/test_spec.py holds them together with dataclasses.fields).
JOB_COLUMNS = (
    "id, type, queue, payload, status, priority, attempt, max_retries, run_at, claimed_at, "
    "started_at, heartbeat_at, completed_at, created_at, result, error, errors, worker_id, "
    "lease, idempotency_key, tags, progress, cancelled_by, retried_as, schedule, scheduled_for, snoozes, "
    "unique_while"
)
DEAD_LETTER_COLUMNS = (
    "id, original_id, type, queue, payload, priority, max_retries, error, attempts, errors, "
    "worker_id, died_at, replayed_at, replayed_as, signature, group_id"
)

# ---------------------------------------------------------------------------------------
# Enqueue

# KEY_HELD: a live row (jobs_live) holds its idempotency key now: always ('always'),
# while pending, claimed or running ('active'), while pending ('pending'). Spelt exactly
# as jobs_key_held_idx's predicate (migrations 0008, 0013), so that a lookup of holders
# scans that index. A finished job of the scope 'always' holds its key through its row
# in job_idempotency_keys (schema 13: no unique index spans partitions).
KEY_HELD = (
    "idempotency_key IS NOT NULL AND (unique_while = 'always' OR status = 'pending' "
    "OR (unique_while = 'active' AND status IN ('claimed', 'running')))"
)

# LIVE: the status test that makes the planner read jobs_live only (partition pruning);
# every statement that reads or writes jobs that are pending or in flight carries it.
LIVE = "status IN ('pending', 'claimed', 'running')"

# The inserts of jobs that may carry keys: a row whose key is held for ever by another
# job (job_idempotency_keys) is left out, and ON CONFLICT DO NOTHING leaves out one
# whose key a live job holds (jobs_key_held_idx, the only unique index of jobs_live
# that an insert can meet: ids come from the sequence). Two inserts of one key wait on
# each other at that index, whatever their scopes, so one job takes it. Then the keys
# of the jobs inserted with the scope 'always' are recorded, in the same statement.
# {rows} is a SELECT of the columns of _KEYED_INSERT_COLUMNS with the key as
# idempotency_key; {returning}, what the statement returns of the jobs inserted.
_KEYED_INSERT_COLUMNS = "type, queue, payload, priority, max_retries, run_at, idempotency_key, tags, unique_while"
_KEYED_INSERT = (
    "WITH inserted AS (INSERT INTO jobs ({columns}) "
    "SELECT * FROM ({rows}) AS r WHERE r.idempotency_key IS NULL OR NOT EXISTS "
    "(SELECT FROM job_idempotency_keys AS k WHERE k.idempotency_key = r.idempotency_key) "
    "ON CONFLICT DO NOTHING RETURNING *), "
    "kept AS (INSERT INTO job_idempotency_keys (idempotency_key, job_id) SELECT idempotency_key, id "
    "FROM inserted WHERE idempotency_key IS NOT NULL AND unique_while = 'always') "
    "SELECT {returning} FROM inserted"
)

# JOB_INSERT: one row; a key held by another job (see _KEYED_INSERT) makes it insert
# and return nothing, so the caller reads that job instead.
JOB_INSERT = _KEYED_INSERT.format(
    columns=_KEYED_INSERT_COLUMNS,
    rows="SELECT %(type)s, %(queue)s, %(payload)s::jsonb, %(priority)s::smallint, %(max_retries)s::int, "
    "coalesce(%(run_at)s, now()), %(idempotency_key)s::text AS idempotency_key, %(tags)b::text[], "
    "%(unique_while)s::text",
    returning=JOB_COLUMNS,
)

# JOB_IDS_RESERVE: the transaction's timestamp (now(), what the column defaults use)
# and n ids from the identity sequence, so that the rows can then go in by COPY. The
# sequence is looked up once (an InitPlan), not once per id: 0.6 us an id, not 3.2.
JOB_IDS_RESERVE = (
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

# JOB_INSERT_MANY: many rows, some with idempotency keys, from parallel arrays in one
# statement; returns what the caller cannot know (id, run_at and created_at defaults).
# Same idempotency rule as JOB_INSERT. Each job's tags travel as one array literal
# (tag arrays differ in length, and a PostgreSQL array of arrays cannot).
JOB_INSERT_MANY = _KEYED_INSERT.format(
    columns=_KEYED_INSERT_COLUMNS,
    rows="SELECT type, queue, payload, priority, max_retries, coalesce(run_at, now()), idempotency_key, "
    "tags::text[], unique_while FROM unnest(%(types)b::text[], %(queues)b::text[], %(payloads)b::jsonb[], "
    "%(priorities)b::smallint[], %(max_retries)b::int[], %(run_ats)b::timestamptz[], "
    "%(idempotency_keys)b::text[], %(tags)b::text[], %(unique_whiles)b::text[]) "
    "AS j(type, queue, payload, priority, max_retries, run_at, idempotency_key, tags, unique_while)",
    returning="id, idempotency_key, run_at, created_at",
)

# JOB_INSERT_RESERVED: many rows without idempotency keys, under ids reserved for them
# (JOB_IDS_RESERVE) so that their inserter knows them before it sends this, from
# parallel arrays in one statement; all or nothing (an id already stored raises on
# jobs_live_pkey). Guarded by the sequence: inserts nothing if the highest id (last_id) is
# above what the sequence has handed out, i.e. it was restarted (TRUNCATE ... RESTART
# IDENTITY) since the reservation and would hand those ids out again. Returns the
# defaults the caller cannot know. Tags as in JOB_INSERT_MANY.
JOB_INSERT_RESERVED_ROWS = (
    "INSERT INTO jobs (id, type, queue, payload, priority, max_retries, run_at, tags) "
    "SELECT id, type, queue, payload, priority, max_retries, coalesce(run_at, now()), tags::text[] "
    "FROM unnest(%(ids)b::bigint[], %(types)b::text[], %(queues)b::text[], %(payloads)b::jsonb[], "
    "%(priorities)b::smallint[], %(max_retries)b::int[], %(run_ats)b::timestamptz[], %(tags)b::text[]) "
    "AS j(id, type, queue, payload, priority, max_retries, run_at, tags) "
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

# JOB_GET_BY_IDS: the jobs with some ids (jobs_pkey), no lock: those an earlier
# JOB_INSERT_RESERVED_IF_ABSENT stored.
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

# ---------------------------------------------------------------------------------------
# Reading the ledger

# JOB_GET: one row by primary key, no lock.
JOB_GET = "SELECT " + JOB_COLUMNS + " FROM jobs WHERE id = %(id)s"

# JOB_LIST: the SELECT (or the count) and FROM of a listing, no lock; jobq.jobs.ledger adds
# the filters given (JOB_LIST_FILTERS, with psycopg.sql) and orders newest first
# (jobs_created_idx, jobs_type_created_idx or jobs_dead_created_idx).
JOB_LIST_SELECT = "SELECT " + JOB_COLUMNS + " FROM jobs"
JOB_LIST_COUNT = "SELECT count(*) FROM jobs"
# JOB_LIST_COUNT_UP_TO: a listing's total counted no further than %(cap)s rows (the
# filter in {where}): a common tag's half a million rows are not all counted for a page.
JOB_LIST_COUNT_UP_TO = "SELECT count(*) FROM (SELECT FROM jobs{where} LIMIT %(cap)s) AS capped"
JOB_LIST_ORDER = " ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s"
# JOB_LIST_AFTER: the keyset predicate of a page after a cursor (jobq.jobs.cursors): rows older
# than the last one shown, in the listing's order. A row comparison on the trailing
# (created_at, id) of jobs_created_idx, jobs_type_created_idx or jobs_dead_created_idx:
# an index condition, so a page deep in a million rows reads about a page of rows.
JOB_LIST_AFTER = "(created_at, id) < (%(after_created_at)s, %(after_id)s)"
# JOB_GET_CREATED_AT: where a listing starting after one job (?before=<id>) starts (jobs_pkey).
JOB_GET_CREATED_AT = "SELECT created_at FROM jobs WHERE id = %(id)s"
# JOB_LIST_FEW: a page of a filter that JOB_LIST_COUNT_UP_TO found few rows for: all of
# them first (MATERIALIZED: by the filter's own index, a rare tag's through
# jobs_tags_idx, ids' through jobs_pkey), then sorted. Without the fence the planner
# may walk jobs_created_idx newest first, expecting the page soon, and read the whole
# index for a rare tag whose frequency its statistics overestimate.
JOB_LIST_FEW = (
    "WITH matching AS MATERIALIZED (SELECT " + JOB_COLUMNS + " FROM jobs{where}) "
    "SELECT " + JOB_COLUMNS + " FROM matching" + JOB_LIST_ORDER
)

# JOB_LIST_FILTERS: the WHERE clauses of a filter (jobq.jobs.filters) by field name, for
# listings, dry runs and bulk operations; jobq.jobs.filters joins those given with AND. type
# walks jobs_type_created_idx, status 'dead' jobs_dead_created_idx; another status and
# queue filter the walk of jobs_created_idx (no full index on either, see 0001_jobs.sql);
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

# JOB_DELETE_IF_PENDING: delete (jobq.delete, DELETE /jobs/{id}); guarded by status so a
# claimed job is never deleted under its worker (the row lock makes a concurrent claim
# wait, then skip it).
JOB_DELETE_IF_PENDING = "DELETE FROM jobs WHERE id = %(id)s AND status = 'pending' RETURNING id"

# JOB_GET_STATUS: why a delete or a cancel changed nothing (absent, or in which status).
JOB_GET_STATUS = "SELECT status FROM jobs WHERE id = %(id)s"

# JOB_CANCEL_IF_UNFINISHED: pending|claimed|running -> cancelled for some ids, with
# completed_at, who, and a new lease (a late outcome of the old run is a stale write).
# Rows are locked in id order (primary key) and their status rechecked on the latest
# version, so a cancel racing an outcome leaves exactly one of them. An in-flight job's
# cancel is announced on the jobq_control channel ('cancel <id>'), where the
# maintenance process of every host hears it and stops the run. Returns each changed
# id with its status before.
JOB_CANCEL_IF_UNFINISHED = (
    "WITH target AS (SELECT id, status FROM jobs WHERE id = ANY(%(ids)b::bigint[]) "
    "AND status IN ('pending', 'claimed', 'running') ORDER BY id FOR UPDATE), "
    "cancelled AS (UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = %(actor)s, "
    "lease = nextval('jobs_lease_seq') FROM target WHERE j.id = target.id AND j." + LIVE + " "
    "RETURNING j.id, target.status AS was) "
    "SELECT id, was, CASE WHEN was <> 'pending' THEN pg_notify('jobq_control', 'cancel ' || id) END FROM cancelled"
)

# COUNTERS_GET: exact depth per (queue, type, status) and monotonic totals, summed over
# the slots of job_counters (applications' 0..15, one per jobq session from 16: a small
# table, no jobs scan).
COUNTERS_GET = "SELECT queue, type, name, sum(n)::bigint FROM job_counters GROUP BY queue, type, name"

# COUNTERS_GET_PENDING: the admission-control check; same table.
COUNTERS_GET_PENDING = "SELECT coalesce(sum(n), 0)::bigint FROM job_counters WHERE name = 'pending'"

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

# OPEN_QUEUES: a CTE fragment (the claim's and the idle timer's): those of
# %(queues)s that are not paused, each checked with one primary-key probe of
# jobq_queues. MATERIALIZED, so that the check runs once per queue before the
# per-queue scans of jobs, never once per candidate row. A claim already under way
# when a pause commits works from its own snapshot: what it took goes back from the
# worker's batch unstarted (jobq.daemon), which hears the pause on jobq_control.
OPEN_QUEUES = (
    "open_queues AS MATERIALIZED (SELECT q.queue FROM unnest(%(queues)b::text[]) AS q(queue) "
    "WHERE NOT EXISTS (SELECT FROM jobq_queues AS p WHERE p.name = q.queue AND p.paused_at IS NOT NULL))"
)

# EACH_PRIORITY: the priorities, to read pending jobs in run_at order through the claim
# index: within one (queue, priority), jobs_pending_claim_idx is in run_at order, so
# the earliest pending job of a queue is the earliest of one probe per priority. (An
# index of pending jobs by (queue, run_at) would answer with one probe, but every new
# job would pay it an entry: 1-2 us of a bulk enqueue's 15, more than all the probes.)
EACH_PRIORITY = f"generate_series({MIN_PRIORITY}, {MAX_PRIORITY}) AS p(priority)"

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

# ---------------------------------------------------------------------------------------
# Claiming and outcomes (the worker's side)

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
JOB_CLAIM = (
    "WITH " + OPEN_QUEUES + ", "
    "due AS (SELECT c.id FROM open_queues AS q, LATERAL ("
    "SELECT id, priority, run_at FROM jobs "
    "WHERE status = 'pending' AND queue = q.queue AND run_at <= now() "
    "ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) AS c "
    "ORDER BY c.priority DESC, c.run_at, c.id LIMIT {limit}) "
    "UPDATE jobs AS j SET status = 'claimed', claimed_at = now(), heartbeat_at = now(), "
    "started_at = NULL, worker_id = %(worker_id)s, lease = nextval('jobs_lease_seq') "
    "FROM due WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.id = due.id AND j." + LIVE + " "
    "RETURNING " + ", ".join("j." + c.strip() for c in JOB_COLUMNS.split(",")) + ", "
    "pg_try_advisory_lock(%(lock_base)s | j.id)"
)

# CLAIM_SESSION_PLANNER: a worker's claim session never plans a bitmap scan. Autovacuum
# analyses jobs_live whenever a fiftieth of it changed, and a queue that just drained
# is then analysed empty (reltuples = 0). Until the next analysis the planner believes
# a backlog that arrives is one row, and served the claim by reading every due job of
# the queue through a bitmap scan and sorting them all (47 ms a claim with 100,000
# waiting, so the drain fell to a third and the backlog grew: the stalls of the first
# soak of schema 13), instead of the first ones through jobs_pending_claim_idx in
# order. Every statement of the session is a range of that index or probes by id,
# which a plain index scan serves as well.
CLAIM_SESSION_PLANNER = "SET enable_bitmapscan = off"

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


BY_ID_IN_FLIGHT = _status_is("claimed", "running")

# _BY_IDS: the ids of a batch as an index condition of its own, beside the join with the
# batch's arrays: with statistics taken while jobs_live was empty (reltuples = 0), the
# join alone was planned as a full scan of jobs_live or of its primary key per write.
_BY_IDS = "j.id = ANY(%(ids)b::bigint[])"


# JOB_START_IF_LEASED: claimed -> running, guarded by lease and status; started_at is
# the database's now() less the time the worker has already been running it.
JOB_START_IF_LEASED = (
    "UPDATE jobs AS j SET status = 'running', heartbeat_at = now(), "
    "started_at = now() - make_interval(secs => s.elapsed) "
    "FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(elapsed)b::float8[]) AS s(id, lease, elapsed) "
    "WHERE " + _BY_IDS + " AND j.id = s.id AND j.lease = s.lease AND " + _status_is("claimed") + " "
    "RETURNING j.id"
)

# JOB_HEARTBEAT_IF_LEASED: touch heartbeat_at of in-flight rows still held under the
# given leases (primary key); the ids not returned were taken away.
JOB_HEARTBEAT_IF_LEASED = (
    "UPDATE jobs AS j SET heartbeat_at = now() "
    "FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[]) AS s(id, lease) "
    "WHERE " + _BY_IDS + " AND j.id = s.id AND j.lease = s.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id"
)

# JOB_COMPLETE_IF_LEASED: claimed|running -> done, guarded by lease and status, for a
# batch of outcomes; releases the advisory locks of the batch in the same statement.
# Returns each id with whether its write was recorded (false: a stale lease).
JOB_COMPLETE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(results)b::jsonb[], "
    "%(elapsed)b::float8[], %(locked)b::bool[]) AS o(id, lease, result, elapsed, locked)), "
    "done AS (UPDATE jobs AS j SET status = 'done', result = o.result, error = NULL, "
    "completed_at = now(), heartbeat_at = now(), "
    "started_at = coalesce(j.started_at, now() - make_interval(secs => o.elapsed)) "
    "FROM o WHERE " + _BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, done.id IS NOT NULL, "
    "CASE WHEN o.locked THEN pg_advisory_unlock(%(lock_base)s | o.id) END "
    "FROM o LEFT JOIN done ON done.id = o.id"
)

# The unlock of an outcome statement that may send a job back to pending: only once
# every row of ``cte`` is written (the uncorrelated count runs the update to its end
# before the first unlock). Such an update can fail on jobs_key_held_idx (a job whose
# key was taken while it ran, by an inserter that had not committed yet, see migration
# 0008): then no lock has been let go, and the writer can simply try again.
def _unlock_after(cte: str) -> str:
    return (
        f"CASE WHEN o.locked AND (SELECT count(*) FROM {cte}) >= 0 "
        "THEN pg_advisory_unlock(%(lock_base)s | o.id) END"
    )


# The failures a job's row recorded after its dead letter was written: a dead job put
# back to pending by hand (SQL) that dies again adds them to its dead letter.
_FAILURES_SINCE_DEATH = (
    "coalesce((SELECT jsonb_agg(e) FROM jsonb_array_elements(excluded.errors) AS e "
    "WHERE (e->>'at')::timestamptz > d.died_at), '[]'::jsonb)"
)

# JOB_FAIL_IF_LEASED: claimed|running -> pending (attempt + 1, run_at pushed by the
# given delay) while attempt < max_retries, else -> dead with its copy inserted into
# dead_letter_jobs by the same statement (unique on original_id: never twice; a job that
# dies again after an operator re-queued it by hand updates its dead letter). Guarded
# by lease and status; releases the advisory locks of the batch. ``max_retries`` entries
# that are not NULL override the row's (a handler's own limit).
JOB_FAIL_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(errors)b::text[], "
    "%(delays)b::float8[], %(max_retries)b::int[], %(elapsed)b::float8[], %(locked)b::bool[]) "
    "AS o(id, lease, error, delay, max_retries, elapsed, locked)), "
    "failed AS (UPDATE jobs AS j SET "
    "status = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN 'pending' ELSE 'dead' END, "
    "attempt = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN j.attempt + 1 ELSE j.attempt END, "
    "run_at = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) "
    "THEN now() + make_interval(secs => o.delay) ELSE j.run_at END, "
    "completed_at = CASE WHEN j.attempt < coalesce(o.max_retries, j.max_retries) THEN NULL ELSE now() END, "
    "error = o.error, heartbeat_at = now(), "
    "started_at = coalesce(j.started_at, now() - make_interval(secs => o.elapsed)), "
    "errors = j.errors || jsonb_build_array(jsonb_build_object("
    "'attempt', j.attempt, 'error', o.error, 'worker_id', j.worker_id, 'at', now())) "
    "FROM o WHERE " + _BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id, j.type, j.queue, j.payload, j.priority, j.max_retries, j.error, j.attempt, "
    "j.errors, j.worker_id, j.status, j.run_at), "
    "dead AS (INSERT INTO dead_letter_jobs AS d (original_id, type, queue, payload, priority, max_retries, "
    "error, attempts, errors, worker_id) "
    "SELECT id, type, queue, payload, priority, max_retries, error, attempt + 1, errors, worker_id "
    "FROM failed WHERE status = 'dead' "
    "ON CONFLICT (original_id) DO UPDATE SET error = excluded.error, worker_id = excluded.worker_id, "
    "died_at = now(), attempts = d.attempts + jsonb_array_length(" + _FAILURES_SINCE_DEATH + "), "
    "errors = d.errors || " + _FAILURES_SINCE_DEATH + " "
    "RETURNING original_id) "
    "SELECT o.id, failed.status, failed.attempt, failed.run_at, " + _unlock_after("failed") + " "
    "FROM o LEFT JOIN failed ON failed.id = o.id"
)

# JOB_RELEASE_IF_LEASED: claimed|running -> pending with no attempt counted (a claimed
# job the worker gives back, a running job returned at shutdown), guarded by lease
# and status; releases the advisory locks of the batch.
JOB_RELEASE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(locked)b::bool[]) "
    "AS o(id, lease, locked)), "
    "released AS (UPDATE jobs AS j SET status = 'pending', started_at = NULL "
    "FROM o WHERE " + _BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, released.id IS NOT NULL, " + _unlock_after("released") + " "
    "FROM o LEFT JOIN released ON released.id = o.id"
)

# JOB_CANCEL_IF_LEASED: claimed|running -> cancelled, by the worker whose handler ended
# cancelled (it raised jobq.Cancelled); guarded by lease and status, so that a job
# already cancelled by an operator (whose cancel replaced the lease) is left as it is.
# Releases the advisory locks of the batch either way.
JOB_CANCEL_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(locked)b::bool[]) "
    "AS o(id, lease, locked)), "
    "cancelled AS (UPDATE jobs AS j SET status = 'cancelled', completed_at = now(), cancelled_by = %(actor)s "
    "FROM o WHERE " + _BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, cancelled.id IS NOT NULL, "
    "CASE WHEN o.locked THEN pg_advisory_unlock(%(lock_base)s | o.id) END "
    "FROM o LEFT JOIN cancelled ON cancelled.id = o.id"
)

# JOB_PROGRESS_SET_IF_LEASED: a running job's latest progress, written by its worker's
# heartbeat thread; guarded by lease and status (primary key). No status change: the
# counters' trigger finds nothing to count.
JOB_PROGRESS_SET_IF_LEASED = (
    "UPDATE jobs AS j SET progress = %(progress)s::jsonb "
    "WHERE j.id = %(id)s AND j.lease = %(lease)s AND " + BY_ID_IN_FLIGHT + " RETURNING j.id"
)

# JOB_SNOOZE_IF_LEASED: claimed|running -> pending with run_at pushed by each job's
# delay, snoozes + 1, no attempt counted (a handler raised jobq.Snooze); guarded by
# lease and status; releases the advisory locks of the batch. Returns each id with
# whether its write was recorded (false: a stale lease).
JOB_SNOOZE_IF_LEASED = (
    "WITH o AS (SELECT * FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[], %(delays)b::float8[], "
    "%(locked)b::bool[]) AS o(id, lease, delay, locked)), "
    "snoozed AS (UPDATE jobs AS j SET status = 'pending', run_at = now() + make_interval(secs => o.delay), "
    "snoozes = j.snoozes + 1, started_at = NULL, heartbeat_at = now() "
    "FROM o WHERE " + _BY_IDS + " AND j.id = o.id AND j.lease = o.lease AND " + BY_ID_IN_FLIGHT + " "
    "RETURNING j.id) "
    "SELECT o.id, snoozed.id IS NOT NULL, " + _unlock_after("snoozed") + " "
    "FROM o LEFT JOIN snoozed ON snoozed.id = o.id"
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
    "WHERE " + _BY_IDS + " AND " + BY_ID_IN_FLIGHT + " FOR UPDATE OF j) "
    "SELECT s.id, mine.id IS NOT NULL, mine.id IS NOT NULL AND pg_try_advisory_lock(%(lock_base)s | s.id) "
    "FROM unnest(%(ids)b::bigint[]) AS s(id) LEFT JOIN mine ON mine.id = s.id"
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

# JOB_RELEASE_ORPHANS_OF_WORKER: after a reconnect, claimed jobs of this worker that it
# does not know it holds (a claim that committed while its answer was lost with the
# connection) go back to pending at once, no attempt counted; the worker runs no job
# it does not know, and its old session, which had their locks, is gone.
JOB_RELEASE_ORPHANS_OF_WORKER = (
    "UPDATE jobs SET status = 'pending', started_at = NULL "
    "WHERE worker_id = %(worker_id)s AND status = 'claimed' AND id <> ALL(%(held)b::bigint[]) RETURNING id"
)

# JOB_GET_FINISHED_UNDER_LEASE: of some (id, lease) pairs, the jobs whose row still
# carries that lease but is no longer in flight: after a connection broke mid-commit,
# an outcome that was in fact recorded (not a stale write).
JOB_GET_FINISHED_UNDER_LEASE = (
    "SELECT j.id FROM unnest(%(ids)b::bigint[], %(leases)b::bigint[]) AS s(id, lease) "
    "JOIN jobs AS j ON j.id = s.id AND j.lease = s.lease AND j.status NOT IN ('claimed', 'running')"
)

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

# DEAD_LETTER_DELETE_DIED_BEFORE: retention of dead letters (JOBQ_DEAD_LETTER_RETENTION),
# up to %(batch)s of them, oldest first (dead_letter_jobs_died_idx, backwards),
# replayed or not; the group triggers keep the groups' counts.
DEAD_LETTER_DELETE_DIED_BEFORE = (
    "DELETE FROM dead_letter_jobs WHERE id IN (SELECT id FROM dead_letter_jobs "
    "WHERE died_at < now() - make_interval(secs => %(older_than)s) ORDER BY died_at LIMIT %(batch)s "
    "FOR UPDATE SKIP LOCKED)"
)

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

# LEADER_TRY_LOCK: the maintenance leader's session lock (reserved key); held for as
# long as its connection lives.
LEADER_TRY_LOCK = "SELECT pg_try_advisory_lock(%(key)s)"

# ---------------------------------------------------------------------------------------
# Dead letters

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
DEAD_LETTER_GET_REPLAYED_AS = "SELECT replayed_at IS NOT NULL, replayed_as FROM dead_letter_jobs WHERE id = %(id)s"

# DEAD_LETTER_DELETE: discard one dead-letter row for good.
DEAD_LETTER_DELETE = "DELETE FROM dead_letter_jobs WHERE id = %(id)s RETURNING id"

# ---------------------------------------------------------------------------------------
# Workers

# WORKER_REGISTER: a worker process announces itself (primary key; a restarted pid
# with the same id replaces the stale row).
WORKER_REGISTER = (
    "INSERT INTO workers (id, hostname, pid, queues) VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s) "
    "ON CONFLICT (id) DO UPDATE SET started_at = now(), heartbeat_at = now(), current_job_id = NULL, jobs_done = 0"
)

# WORKER_HEARTBEAT: the worker is alive, runs this job (or none), has recorded this many.
WORKER_HEARTBEAT = (
    "UPDATE workers SET heartbeat_at = now(), current_job_id = %(current_job_id)s, jobs_done = %(jobs_done)s "
    "WHERE id = %(id)s"
)

# WORKER_DELETE: a worker leaving cleanly removes its row.
WORKER_DELETE = "DELETE FROM workers WHERE id = %(id)s"

# WORKER_DELETE_IF_STALE: the maintenance leader removes the rows of workers whose
# heartbeat stopped (a seq scan of a table of a few rows per worker process).
WORKER_DELETE_IF_STALE = (
    "DELETE FROM workers WHERE heartbeat_at < now() - make_interval(secs => %(stale_seconds)s) RETURNING id"
)

# ---------------------------------------------------------------------------------------
# Inspection (jobq inspect)

# WORKER_LIST: every registered worker with its heartbeat age (a table of a few rows), and
# the progress of the job it runs (one primary-key probe each).
WORKER_LIST = (
    "SELECT w.id, w.hostname, w.pid, w.queues, w.current_job_id, w.jobs_done, w.started_at, "
    "extract(epoch FROM now() - w.heartbeat_at)::float8, "
    "(SELECT j.progress FROM jobs AS j WHERE j.id = w.current_job_id) "
    "FROM workers AS w ORDER BY w.hostname, w.pid"
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

# JOB_LIST_RECENT_FAILURES: jobs whose last run failed, latest first (jobs_failed_idx).
JOB_LIST_RECENT_FAILURES = (
    "SELECT id, type, queue, status, attempt, max_retries, error, heartbeat_at FROM jobs "
    "WHERE error IS NOT NULL ORDER BY heartbeat_at DESC LIMIT %(limit)s"
)

# DEAD_LETTER_COUNT_WAITING: dead letters not replayed (dead_letter_jobs_waiting_idx).
DEAD_LETTER_COUNT_WAITING = "SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL"

# DEAD_LETTER_LIST_WAITING: the latest dead letters not replayed (same index).
DEAD_LETTER_LIST_WAITING = (
    "SELECT id, original_id, type, queue, attempts, error, died_at FROM dead_letter_jobs "
    "WHERE replayed_at IS NULL ORDER BY died_at DESC LIMIT %(limit)s"
)

# ADVISORY_LOCKS_OF_NAMESPACE: jobq's advisory locks held now (pg_locks shows a bigint
# key as classid, the high 32 bits, and objid, the low 32), with their sessions.
ADVISORY_LOCKS_OF_NAMESPACE = (
    "SELECT ((l.classid::bigint << 32) | l.objid::bigint) & %(mask)s, l.pid, a.application_name "
    "FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND (l.classid::bigint >> 16) = %(namespace)s "
    "ORDER BY 1"
)

# ---------------------------------------------------------------------------------------
# Metrics (jobq.observe.metrics; every statement is bounded whatever the size of jobs)

# COUNTER_SAMPLE_BASELINE: the totals of the newest sample at least %(window)s seconds
# old (the oldest sample while the history is shorter), with its age in seconds.
COUNTER_SAMPLE_BASELINE = (
    "WITH base AS (SELECT coalesce(max(at) FILTER (WHERE at <= now() - make_interval(secs => %(window)s)), "
    "min(at)) AS at FROM job_counter_samples) "
    "SELECT s.queue, s.name, sum(s.n)::bigint, extract(epoch FROM now() - base.at)::float8 "
    "FROM job_counter_samples AS s JOIN base ON s.at = base.at GROUP BY s.queue, s.name, base.at"
)

# JOB_LIST_RECENT_RUN_TIMES: run time and start latency of the jobs finished done in the
# trailing window, the most recent %(limit)s at most (jobs_completed_idx, backwards).
JOB_LIST_RECENT_RUN_TIMES = (
    "SELECT queue, extract(epoch FROM completed_at - started_at)::float8, "
    "extract(epoch FROM started_at - run_at)::float8 FROM jobs "
    "WHERE completed_at > now() - make_interval(secs => %(window)s) AND status = 'done' "
    "ORDER BY completed_at DESC LIMIT %(limit)s"
)

# WORKER_LIST_ACTIVE_QUEUES: the queues of each worker whose heartbeat is fresh.
WORKER_LIST_ACTIVE_QUEUES = (
    "SELECT queues FROM workers WHERE heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s)"
)

# DEAD_LETTER_COUNT_WAITING_BY_QUEUE: dead letters not replayed, per queue
# (dead_letter_jobs_waiting_idx).
DEAD_LETTER_COUNT_WAITING_BY_QUEUE = (
    "SELECT queue, count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL GROUP BY queue"
)

# ---------------------------------------------------------------------------------------
# The per-minute rollup (jobq.observe.rollup; table jobq_minutes, schema 9)

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

# MINUTE_COMPLETED_AT: the jobs done per queue ('' for all) in a minute rolled up.
MINUTE_COMPLETED_AT = "SELECT queue, completed FROM jobq_minutes WHERE minute = %(minute)s"

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

# ---------------------------------------------------------------------------------------
# Partitions of the finished jobs (jobq.store.partitions; the layout is schema 13's)
#
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

# JOBS_ANALYZE: statistics of the partitioned table itself (and of each partition),
# which autovacuum never takes for a partitioned table: the planner reads them for
# the statements that are not pruned to one partition (listings, GET by id).
# SKIP_LOCKED: a partition autovacuum is working on is left to it. Waiting for it
# cancelled autovacuum after deadlock_timeout (a second): in a soak with a partition a
# minute, its vacuum of jobs_live was cancelled four times in 16 minutes.
JOBS_ANALYZE = "ANALYZE (SKIP_LOCKED) jobs"

# JOBS_ANALYSIS_DUE: whether the partitioned table was never analysed (as far as the
# statistics collector knows: a crash forgets it) or last analysed over %(every)s
# seconds ago.
JOBS_ANALYSIS_DUE = (
    "SELECT coalesce(max(last_analyze) < now() - make_interval(secs => %(every)s), true) "
    "FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
)

# ---------------------------------------------------------------------------------------
# The planner's statistics (jobq.store.statistics)

# JOBS_LIVE_STATISTICS_STALE: whether the planner's count of jobs_live (pg_class.reltuples:
# -1 never analysed, 0 analysed empty) is %(factor)s times short of the jobs live now
# (the exact counters: a scan of job_counters, a small table), with at least
# %(min_rows)s of them. Never analysed, the planner's guess for the claim read every
# due job of the queue and sorted them all (23 ms a claim with 50,000 jobs waiting, 80
# ms with 200,000); analysed empty, a bitmap scan did the same (see
# CLAIM_SESSION_PLANNER), and other plans are guesses too until autovacuum's next look.
JOBS_LIVE_STATISTICS_STALE = (
    "SELECT live.n >= %(min_rows)s AND live.n > %(factor)s * greatest(c.reltuples, 0) "
    "FROM pg_class AS c, (SELECT coalesce(sum(n), 0) AS n FROM job_counters "
    "WHERE name IN ('pending', 'claimed', 'running')) AS live WHERE c.oid = 'jobs_live'::regclass"
)
JOBS_LIVE_ANALYZE = "ANALYZE jobs_live"

# ---------------------------------------------------------------------------------------
# Migrations (jobq.store.migrate; the DDL itself is in jobq/store/migrations/NNNN_name.sql)

# MIGRATION_LOCK: the session-level advisory lock on the reserved key locks.MIGRATIONS
# (in the namespace); waits while another migrate holds it. Touches no table.
MIGRATION_LOCK = "SELECT pg_advisory_lock(%(key)s)"

# MIGRATION_UNLOCK: releases MIGRATION_LOCK (false, and a server warning, if not held).
MIGRATION_UNLOCK = "SELECT pg_advisory_unlock(%(key)s)"

# MIGRATIONS_TABLE_EXISTS: whether jobq_migrations exists yet (a catalog lookup, no
# lock); a database without it is at version 0.
MIGRATIONS_TABLE_EXISTS = "SELECT to_regclass('jobq_migrations') IS NOT NULL"

# MIGRATION_VERSION_GET: the newest recorded version (max of the primary key, a table
# of a few rows; no lock).
MIGRATION_VERSION_GET = "SELECT coalesce(max(version), 0) FROM jobq_migrations"

# MIGRATION_LIST_VERSIONS: every version recorded (numbers may have gaps: jobq.store.migrate).
MIGRATION_LIST_VERSIONS = "SELECT version FROM jobq_migrations"

# JOBS_ANY: whether jobs holds a row (one row read at most): a conversion of the
# table (jobq.store.migrate.CONVERSIONS) is applied unasked only where it holds none.
JOBS_ANY = "SELECT EXISTS (SELECT FROM jobs)"

# MIGRATION_RECORD: one file applied, in the same transaction as its DDL; run under
# MIGRATION_LOCK, and the primary key on version refuses a second record of a file.
MIGRATION_RECORD = "INSERT INTO jobq_migrations (version, name) VALUES (%(version)s, %(name)s)"

# ---------------------------------------------------------------------------------------
# Health

# DATABASE_PING: the database answers (readiness); touches no table.
DATABASE_PING = "SELECT 1"

# ---------------------------------------------------------------------------------------
# Audit (jobq.jobs.audit)

# AUDIT_INSERT: one operator action; no lock beyond the new row.
AUDIT_INSERT = (
    "INSERT INTO jobq_audit (actor, action, target, counts) "
    "VALUES (%(actor)s, %(action)s, %(target)s::jsonb, %(counts)s::jsonb) RETURNING id"
)

# AUDIT_LIST: newest first (jobq_audit_at_idx), keyset: rows older than %(before)s (an
# id; NULL for the first page).
AUDIT_LIST = (
    "SELECT id, at, actor, action, target, counts FROM jobq_audit "
    "WHERE %(before)s::bigint IS NULL OR id < %(before)s ORDER BY at DESC, id DESC LIMIT %(limit)s"
)

# AUDIT_DELETE_BEFORE: the leader's pruning of rows older than JOBQ_AUDIT_RETENTION, a
# batch at a time (jobq_audit_at_idx).
AUDIT_DELETE_BEFORE = (
    "DELETE FROM jobq_audit WHERE id IN (SELECT id FROM jobq_audit "
    "WHERE at < now() - make_interval(secs => %(older_than)s) ORDER BY at LIMIT %(batch)s)"
)

# AUDIT_KEY_GET: the server-side key that API actors are an HMAC under (a table of one row).
AUDIT_KEY_GET = "SELECT key FROM jobq_keys WHERE name = 'audit'"

# ---------------------------------------------------------------------------------------
# Queues (jobq.jobs.queues; the claim's side is OPEN_QUEUES, above)

# QUEUE_LIST: every queue ever paused, with its pause (a table of a few rows, no lock);
# paused_at is NULL for a queue resumed since.
QUEUE_LIST = "SELECT name, paused_at, paused_by, reason FROM jobq_queues ORDER BY name"

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
    "SELECT name, pg_notify('jobq_control', 'pause ' || name) FROM paused"
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
    "SELECT name, pending, pg_notify('jobq_control', 'resume ' || name), "
    "CASE WHEN pending > 0 THEN jobq_wake(ARRAY[name], ARRAY[pending]) END FROM depth"
)

# ---------------------------------------------------------------------------------------
# Dead-letter groups (jobq.jobs.dead_letters.groups; the groups are kept by triggers, 0005)

# DEAD_LETTER_GROUP_LIST_WAITING: groups with letters waiting, newest last_seen first
# (jobq_dead_letter_groups_waiting_idx, partial on count > 0; id breaks ties); never a
# scan of the dead letters themselves.
DEAD_LETTER_GROUP_LIST_WAITING = (
    "SELECT id, type, signature, count, first_seen, last_seen, example_id FROM jobq_dead_letter_groups "
    "WHERE count > 0 ORDER BY last_seen DESC, id LIMIT %(limit)s"
)
# Schedules (jobq.schedules.stored: declaring and operating them; jobq.daemon.maintenance.firing: the leader's
# firing). A worker is live while its heartbeat is younger than %(stale_seconds)s; a
# schedule fires while a live worker declares it (workers.schedules ? name: a seq scan
# of a table of a few rows per worker process).

# DATABASE_NOW: the database's clock, which slots are computed against (in the caller's
# transaction: the now() its next statements see).
DATABASE_NOW = "SELECT now()"

# SCHEDULE_UPSERT_IF_CHANGED: a worker's declarations, in name order (two workers booting
# at once lock the rows in one order). A new name is inserted; a known one whose
# definition hash differs is replaced (the newest upsert wins), keeping next_run_at
# unless the cron or zone changed; paused_* are never touched (what an operator paused
# stays paused). Returns the names inserted or changed.
SCHEDULE_UPSERT_IF_CHANGED = (
    "INSERT INTO jobq_schedules AS s (name, cron, tz, type, queue, payload, priority, max_retries, catch_up, "
    "overlap, hash, next_run_at) "
    "SELECT * FROM unnest(%(names)b::text[], %(crons)b::text[], %(tzs)b::text[], %(types)b::text[], "
    "%(queues)b::text[], %(payloads)b::jsonb[], %(priorities)b::smallint[], %(max_retries)b::int[], "
    "%(catch_ups)b::text[], %(overlaps)b::text[], %(hashes)b::text[], %(next_run_ats)b::timestamptz[]) ORDER BY 1 "
    "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, type = excluded.type, "
    "queue = excluded.queue, payload = excluded.payload, priority = excluded.priority, "
    "max_retries = excluded.max_retries, catch_up = excluded.catch_up, overlap = excluded.overlap, "
    "hash = excluded.hash, updated_at = now(), next_run_at = CASE WHEN (s.cron, s.tz) = (excluded.cron, excluded.tz) "
    "THEN s.next_run_at ELSE excluded.next_run_at END "
    "WHERE s.hash <> excluded.hash "
    "RETURNING name"
)

# WORKER_DECLARE_SCHEDULES: the names and definition hashes a worker declares, on its
# own row (primary key).
WORKER_DECLARE_SCHEDULES = "UPDATE workers SET schedules = %(schedules)s::jsonb WHERE id = %(id)s"

# WORKER_LIST_SCHEDULE_CONFLICTS: of some declarations, those that another live worker
# declares with a different hash (a rolling deploy): name and how many such workers.
WORKER_LIST_SCHEDULE_CONFLICTS = (
    "SELECT d.name, count(*) FROM workers AS w, jsonb_each_text(w.schedules) AS d(name, hash) "
    "WHERE w.id <> %(id)s AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s) "
    "AND %(schedules)s::jsonb ? d.name AND %(schedules)s::jsonb ->> d.name <> d.hash "
    "GROUP BY d.name ORDER BY d.name"
)

# _LIVE_DECLARER: a worker with a fresh heartbeat declares schedule s.
_LIVE_DECLARER = (
    "EXISTS (SELECT FROM workers AS w WHERE w.schedules ? s.name "
    "AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s))"
)

# SCHEDULE_LOCK_DUE: the leader's due schedules (next_run_at passed, not paused, declared
# by a live worker), row-locked for the firing transaction; rows another leader holds
# are skipped (SKIP LOCKED), and a row it advanced meanwhile is re-read and no longer
# due. With whether the schedule has a job pending, claimed or running
# (jobs_schedule_active_idx), and the transaction's now().
SCHEDULE_LOCK_DUE = (
    "SELECT s.name, s.cron, s.tz, s.type, s.queue, s.catch_up, s.overlap, s.next_run_at, "
    "EXISTS (SELECT FROM jobs AS j WHERE j.schedule = s.name AND j.status IN ('pending', 'claimed', 'running')), "
    "now() FROM jobq_schedules AS s "
    "WHERE s.paused_at IS NULL AND s.next_run_at <= now() AND " + _LIVE_DECLARER + " "
    "ORDER BY s.name LIMIT %(limit)s FOR UPDATE OF s SKIP LOCKED"
)

# JOB_INSERT_SCHEDULED: one job per slot of schedule %(name)s, its spec read from the
# schedule's row (locked by the caller), with the idempotency key 'cron:<name>:<slot>'
# (held 'always', see _KEYED_INSERT), so that a slot fired twice (two leaders during a
# failover) makes one job. Returns the jobs inserted, oldest slot first.
JOB_INSERT_SCHEDULED = _KEYED_INSERT.format(
    columns=_KEYED_INSERT_COLUMNS + ", schedule, scheduled_for",
    rows="SELECT s.type, s.queue, s.payload, s.priority, s.max_retries, now(), k.key AS idempotency_key, "
    "NULL::text[], 'always', s.name, k.slot "
    "FROM jobq_schedules AS s, unnest(%(slots)b::timestamptz[], %(keys)b::text[]) AS k(slot, key) "
    "WHERE s.name = %(name)s ORDER BY k.slot",
    returning="id, scheduled_for",
) + " ORDER BY scheduled_for"

# SCHEDULE_ADVANCE_IF_NEXT_RUN_AT: the next slot, and the latest fired, of a schedule
# the caller locked; guarded by the next_run_at it read (a row advanced by someone else
# matches nothing).
SCHEDULE_ADVANCE_IF_NEXT_RUN_AT = (
    "UPDATE jobq_schedules SET next_run_at = %(next_run_at)s, "
    "last_run_at = coalesce(%(last_run_at)s, last_run_at), last_job_id = coalesce(%(last_job_id)s, last_job_id) "
    "WHERE name = %(name)s AND next_run_at = %(was)s RETURNING name"
)

# SCHEDULE_NEXT_DUE_IN: seconds until the earliest slot of the schedules that would fire
# (not paused, declared by a live worker); negative when one is due; NULL when none.
# A scan of jobq_schedules (one row per schedule).
SCHEDULE_NEXT_DUE_IN = (
    "SELECT extract(epoch FROM min(s.next_run_at) - now())::float8 FROM jobq_schedules AS s "
    "WHERE s.paused_at IS NULL AND " + _LIVE_DECLARER
)

# SCHEDULE_LIST: every schedule with how many live workers declare it (0: orphaned) and
# the status of its last job (primary key), by name; no lock.
SCHEDULE_SELECT = (
    "SELECT s.name, s.cron, s.tz, s.type, s.queue, s.payload, s.priority, s.max_retries, s.catch_up, s.overlap, "
    "s.hash, s.paused_at, s.paused_by, s.reason, s.next_run_at, s.last_run_at, s.last_job_id, "
    "s.created_at, s.updated_at, "
    "(SELECT count(*) FROM workers AS w WHERE w.schedules ? s.name "
    "AND w.heartbeat_at >= now() - make_interval(secs => %(stale_seconds)s))::int AS declared_by, "
    "(SELECT j.status FROM jobs AS j WHERE j.id = s.last_job_id) AS last_job_status, "
    "extract(epoch FROM now() - s.last_run_at)::float8 AS last_run_age_seconds "
    "FROM jobq_schedules AS s"
)
SCHEDULE_LIST = SCHEDULE_SELECT + " ORDER BY s.name"

# SCHEDULE_GET: one schedule (primary key), as SCHEDULE_LIST shows it.
SCHEDULE_GET = SCHEDULE_SELECT + " WHERE s.name = %(name)s"

# JOB_LIST_OF_SCHEDULE: a schedule's latest jobs, newest first (jobs_schedule_created_idx).
JOB_LIST_OF_SCHEDULE = (
    "SELECT " + JOB_COLUMNS + " FROM jobs WHERE schedule = %(name)s ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
)

# SCHEDULE_PAUSE: an operator pauses a schedule (primary key); a second pause keeps the
# first time and records the latest who and why. No row: no such schedule.
SCHEDULE_PAUSE = (
    "UPDATE jobq_schedules SET paused_at = coalesce(paused_at, now()), paused_by = %(actor)s, reason = %(reason)s "
    "WHERE name = %(name)s RETURNING name"
)

# SCHEDULE_RESUME: an operator resumes a schedule (primary key; the row lock orders it
# with a concurrent pause); returns whether it was paused. No row: no such schedule.
SCHEDULE_RESUME = (
    "WITH was AS (SELECT name, paused_at IS NOT NULL AS paused FROM jobq_schedules WHERE name = %(name)s FOR UPDATE) "
    "UPDATE jobq_schedules AS s SET paused_at = NULL, paused_by = NULL, reason = NULL FROM was "
    "WHERE s.name = was.name RETURNING was.paused"
)

# JOB_INSERT_SCHEDULE_RUN: an operator's run-now: one job from the schedule's spec
# (primary key), outside the slot sequence (no scheduled_for, no key), recorded as the
# schedule's last job. No row: no such schedule.
JOB_INSERT_SCHEDULE_RUN = (
    "WITH job AS (INSERT INTO jobs (type, queue, payload, priority, max_retries, schedule) "
    "SELECT type, queue, payload, priority, max_retries, name FROM jobq_schedules WHERE name = %(name)s "
    "RETURNING " + JOB_COLUMNS + "), "
    "mark AS (UPDATE jobq_schedules AS s SET last_job_id = job.id FROM job WHERE s.name = job.schedule) "
    "SELECT " + JOB_COLUMNS + " FROM job"
)

# SCHEDULE_DELETE_ORPHANS: prune the schedules no live worker declares; returns their names.
SCHEDULE_DELETE_ORPHANS = "DELETE FROM jobq_schedules AS s WHERE NOT " + _LIVE_DECLARER + " RETURNING s.name"

# CONTROL_NOTIFY_SCHEDULES: tell the maintenance leader (jobq_control) that a schedule was
# created, changed or resumed, so that it looks again now rather than at its next tick.
# Sent at commit.
CONTROL_NOTIFY_SCHEDULES = "SELECT pg_notify('jobq_control', 'schedules')"

# ---------------------------------------------------------------------------------------
# Single-job actions (jobq.jobs.control: retry and run now; cancel and delete are above)

# JOB_RUN_NOW_IF_SCHEDULED: pending jobs due in the future become due now, for some ids;
# rows locked in id order (primary key), skipping those another session holds (SKIP
# LOCKED: a claim in flight), status and run_at rechecked on the latest version. The
# jobs' update trigger wakes the workers of their queues. Returns the ids changed.
JOB_RUN_NOW_IF_SCHEDULED = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status = 'pending' "
    "AND run_at > now() ORDER BY id FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs AS j SET run_at = now() FROM target WHERE j.id = target.id AND j." + LIVE + " RETURNING j.id"
)

# JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY: for some ids, a new pending job for each dead or
# cancelled job not retried yet, in one statement. A dead job's new job is the replay of
# its dead letter (its type, queue, payload, priority, retries; the letter records
# replayed_at and replayed_as); a job without a letter (cancelled, or its letter
# discarded) is copied from its row. Tags come from the job. Each new id is taken from
# the identity sequence first (nextval), so that the new job, the letter and the
# original (retried_as) are linked in the same statement. Locks: the jobs in id order
# (primary key), then their letters (dead_letter_jobs_original_id_key), both SKIP
# LOCKED: a job or letter another session holds (a single replay in flight) is left
# alone and not retried, never waited for. Guards: status, retried_as IS NULL, and a
# letter not replayed. Returns (original id, new id).
JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY = (
    "WITH j AS MATERIALIZED (SELECT id, type, queue, payload, priority, max_retries, tags FROM jobs "
    "WHERE id = ANY(%(ids)b::bigint[]) AND status IN ('dead', 'cancelled') AND retried_as IS NULL "
    "ORDER BY id FOR UPDATE SKIP LOCKED), "
    "d AS MATERIALIZED (SELECT id, original_id, type, queue, payload, priority, max_retries FROM dead_letter_jobs "
    "WHERE original_id IN (SELECT id FROM j) AND replayed_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED), "
    "src AS MATERIALIZED (SELECT j.id AS original_id, d.id AS letter_id, "
    "nextval(pg_get_serial_sequence('jobs', 'id')) AS new_id, coalesce(d.type, j.type) AS type, "
    "coalesce(d.queue, j.queue) AS queue, coalesce(d.payload, j.payload) AS payload, "
    "coalesce(d.priority, j.priority) AS priority, coalesce(d.max_retries, j.max_retries) AS max_retries, j.tags "
    "FROM j LEFT JOIN d ON d.original_id = j.id "
    "WHERE d.id IS NOT NULL OR NOT EXISTS (SELECT FROM dead_letter_jobs AS x WHERE x.original_id = j.id)), "
    "created AS (INSERT INTO jobs (id, type, queue, payload, priority, max_retries, tags) "
    "SELECT new_id, type, queue, payload, priority, max_retries, tags FROM src ORDER BY new_id), "
    "letters AS (UPDATE dead_letter_jobs AS l SET replayed_at = now(), replayed_as = src.new_id "
    "FROM src WHERE l.id = src.letter_id), "
    "originals AS (UPDATE jobs AS o SET retried_as = src.new_id FROM src WHERE o.id = src.original_id) "
    "SELECT original_id, new_id FROM src"
)

# JOB_GET_RETRY_STATE: why a retry changed nothing: the job's status, the job it was
# retried as, and its dead letter's replay (jobs_pkey, dead_letter_jobs_original_id_key).
JOB_GET_RETRY_STATE = (
    "SELECT j.status, j.retried_as, d.id IS NOT NULL AND d.replayed_at IS NOT NULL, d.replayed_as "
    "FROM jobs AS j LEFT JOIN dead_letter_jobs AS d ON d.original_id = j.id WHERE j.id = %(id)s"
)

# ---------------------------------------------------------------------------------------
# Bulk operations (jobq.jobs.operations)

OPERATION_COLUMNS = (
    "id, action, target, params, actor, state, matched, changed, skipped, cursor, error, "
    "created_at, heartbeat_at, finished_at"
)

# OPERATION_INSERT: a bulk operation, recorded running before its first change.
OPERATION_INSERT = (
    "INSERT INTO jobq_operations (action, target, params, actor) "
    "VALUES (%(action)s, %(target)s::jsonb, %(params)s::jsonb, %(actor)s) RETURNING " + OPERATION_COLUMNS
)

# OPERATION_GET: one operation by primary key, no lock.
OPERATION_GET = "SELECT " + OPERATION_COLUMNS + " FROM jobq_operations WHERE id = %(id)s"

# OPERATION_LIST_RUNNING: the ids of running operations (jobq_operations_running_idx),
# oldest first; whether their runner is gone is then asked of their advisory locks.
OPERATION_LIST_RUNNING = "SELECT id FROM jobq_operations WHERE state = 'running' ORDER BY id"

# OPERATION_TRY_LOCK / OPERATION_LOCK / OPERATION_UNLOCK: the session advisory lock of
# one operation's runner, a two-integer key (jobq.store.locks.operation_key), a key space
# apart from the jobs' bigint keys. Touch no table.
OPERATION_TRY_LOCK = "SELECT pg_try_advisory_lock(%(high)s, %(low)s)"
OPERATION_LOCK = "SELECT pg_advisory_lock(%(high)s, %(low)s)"
OPERATION_UNLOCK = "SELECT pg_advisory_unlock(%(high)s, %(low)s)"

# OPERATION_ADVANCE_IF_AT_CURSOR: one chunk done, in the chunk's own transaction: the
# cursor moves past it and the counts grow. Guarded by state and by the cursor the
# chunk started from (primary key; the row lock orders two runners, the advisory lock
# keeps there from being two). Returns the row, or nothing if the guard failed.
OPERATION_ADVANCE_IF_AT_CURSOR = (
    "UPDATE jobq_operations SET cursor = %(next)s, matched = matched + %(matched)s, "
    "changed = changed + %(changed)s, skipped = skipped + %(skipped)s, heartbeat_at = now() "
    "WHERE id = %(id)s AND state = 'running' AND cursor = %(cursor)s RETURNING " + OPERATION_COLUMNS
)

# OPERATION_FINISH_IF_RUNNING: running -> done | failed (with the error), guarded by state.
OPERATION_FINISH_IF_RUNNING = (
    "UPDATE jobq_operations SET state = %(state)s, error = %(error)s, finished_at = now(), heartbeat_at = now() "
    "WHERE id = %(id)s AND state = 'running' RETURNING " + OPERATION_COLUMNS
)

# JOB_GET_LAST_ID / DEAD_LETTER_GET_LAST_ID: the newest id (the primary key's last
# entry): an operation acts on the rows that existed when it started, up to this id.
JOB_GET_LAST_ID = "SELECT coalesce(max(id), 0) FROM jobs"
DEAD_LETTER_GET_LAST_ID = "SELECT coalesce(max(id), 0) FROM dead_letter_jobs"

# JOB_CHUNK_SELECT / JOB_CHUNK_ORDER: the ids of the next chunk of a filter's jobs
# after the cursor and up to the operation's last id, in id order (a forward walk of
# jobs_pkey, or the filter's index and a sort), no lock; jobq.jobs.operations puts the
# filter's clauses (JOB_LIST_FILTERS) between.
JOB_CHUNK_SELECT = "SELECT id FROM jobs WHERE id > %(cursor)s AND id <= %(last_id)s"
JOB_CHUNK_ORDER = " ORDER BY id LIMIT %(chunk)s"

# JOB_DELETE_IF_NOT_IN_FLIGHT: bulk delete; pending or finished jobs of some ids, never
# claimed or running ones. Rows locked in id order (primary key), skipping those
# another session holds (SKIP LOCKED), status rechecked on the latest version.
JOB_DELETE_IF_NOT_IN_FLIGHT = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status NOT IN ('claimed', 'running') "
    "ORDER BY id FOR UPDATE SKIP LOCKED) "
    "DELETE FROM jobs AS j USING target WHERE j.id = target.id RETURNING j.id"
)

# JOB_SET_PRIORITY_IF_PENDING: bulk priority change of pending jobs of some ids (the
# only ones whose priority still matters), those already at it left alone; same locks.
JOB_SET_PRIORITY_IF_PENDING = (
    "WITH target AS (SELECT id FROM jobs WHERE id = ANY(%(ids)b::bigint[]) AND status = 'pending' "
    "AND priority <> %(priority)s ORDER BY id FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs AS j SET priority = %(priority)s FROM target WHERE j.id = target.id AND j." + LIVE + " RETURNING j.id"
)

# DEAD_LETTER_GROUP_EXISTS: whether a group of dead letters is known (its primary key).
DEAD_LETTER_GROUP_EXISTS = "SELECT EXISTS (SELECT FROM jobq_dead_letter_groups WHERE id = %(id)s)"

# DEAD_LETTER_GROUP_COUNT_WAITING: a group's letters not replayed (the triggers keep it).
DEAD_LETTER_GROUP_COUNT_WAITING = "SELECT count FROM jobq_dead_letter_groups WHERE id = %(id)s"

# DEAD_LETTER_CHUNK_OF_GROUP: the ids of the next chunk of a group's letters not
# replayed after the cursor and up to the operation's last id, in id order
# (dead_letter_jobs_group_waiting_idx), no lock.
DEAD_LETTER_CHUNK_OF_GROUP = (
    "SELECT id FROM dead_letter_jobs WHERE group_id = %(group_id)s AND replayed_at IS NULL "
    "AND id > %(cursor)s AND id <= %(last_id)s ORDER BY id LIMIT %(chunk)s"
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

# ---------------------------------------------------------------------------------------
# The dashboard's reads (web/dashboard): each bounded whatever the size of jobs.

# WORKER_LIST_WITH_JOB: every registered worker (a table of a few rows) with its heartbeat
# age, and the job it runs (one primary-key probe each): progress (as WORKER_LIST), type,
# status, and how long it has run (since started_at, else claimed_at).
WORKER_LIST_WITH_JOB = (
    "SELECT w.id, w.hostname, w.pid, w.queues, w.current_job_id, w.jobs_done, w.started_at, "
    "extract(epoch FROM now() - w.heartbeat_at)::float8, j.progress, j.type, j.status, "
    "extract(epoch FROM now() - coalesce(j.started_at, j.claimed_at))::float8 "
    "FROM workers AS w LEFT JOIN jobs AS j ON j.id = w.current_job_id ORDER BY w.hostname, w.pid"
)

# JOB_COUNT_BY_STATUS_UP_TO: how many of the first %(cap)s jobs matching a filter ({where})
# are in each status: exact when fewer match, else only a lower bound of the total (the
# filter's own index bounds the walk, as JOB_LIST_COUNT_UP_TO's).
JOB_COUNT_BY_STATUS_UP_TO = (
    "SELECT status, count(*) FROM (SELECT status FROM jobs{where} LIMIT %(cap)s) AS capped GROUP BY status"
)

# DEAD_LETTER_LIST_OF_GROUP: the waiting letters of one group, newest first
# (dead_letter_jobs_group_waiting_idx, backwards).
DEAD_LETTER_LIST_OF_GROUP = (
    "SELECT " + DEAD_LETTER_COLUMNS + " FROM dead_letter_jobs WHERE group_id = %(group_id)s AND replayed_at IS NULL "
    "ORDER BY id DESC LIMIT %(limit)s"
)

# DEAD_LETTER_GROUP_GET: one group (primary key), waiting or not.
DEAD_LETTER_GROUP_GET = (
    "SELECT id, type, signature, count, first_seen, last_seen, example_id FROM jobq_dead_letter_groups WHERE id = %(id)s"
)

# JOB_COUNT_SCHEDULED_UP_TO: per queue, pending jobs whose run_at is still ahead, counted
# no further than %(cap)s (a range of the claim index per queue and priority, until
# %(cap)s are found: EACH_PRIORITY).
JOB_COUNT_SCHEDULED_UP_TO = (
    "SELECT q.queue, (SELECT count(*) FROM (SELECT FROM " + EACH_PRIORITY + ", LATERAL ("
    "SELECT FROM jobs WHERE status = 'pending' AND queue = q.queue AND priority = p.priority AND run_at > now() "
    "LIMIT %(cap)s) AS s LIMIT %(cap)s) AS c) FROM unnest(%(queues)s::text[]) AS q(queue)"
)
