-- jobq schema 34: the trigger that looks up an idempotency key's holder keeps plans that
-- hold for any backlog.
--
-- Schema 33 found that PostgreSQL's generic plans, made after five calls of a PL/pgSQL
-- function in a session and kept until the table is analysed again, are made for an
-- empty table when the session's first calls met one (autovacuum analyses jobs_live
-- once a drain has emptied it), and that such a plan reads the whole table.
-- jobs_supersede_returning (schema 8), a row trigger fired by a worker's writes (a job
-- with an idempotency key back to pending, by a retry, a snooze or a give-back), is
-- PL/pgSQL and looks up the live job that holds the key (jobs_key_held_idx), else the
-- key's row in job_idempotency_keys (its primary key). Measured (PostgreSQL 16, one
-- session): a worker session whose first retries of keyed jobs met an empty queue, then
-- 200,000 keyed jobs enqueued: each retry's write took 25-44 ms (the trigger's plan a
-- sequential scan of jobs_live), against 1.5 ms for a session that planned it then.
-- Its reads are probes of a key. Sequential scans off alone would leave a plan made for
-- an empty table free to read a whole index instead; a bitmap scan needs an index
-- condition, so with index scans off and bitmap scans on every read is a probe by the
-- statement's keys, as in the workflow functions of schema 31 (and JIT off, as wherever
-- a plan type is: schema 33): 1.6-2.6 ms a retry, one row read.
ALTER FUNCTION jobs_supersede_returning()
    SET enable_seqscan = off SET enable_indexscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = on
    SET enable_tidscan = off SET jit = off;
