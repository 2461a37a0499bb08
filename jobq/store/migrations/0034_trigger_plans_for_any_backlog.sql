-- jobq schema 34: the row triggers that look jobs or steps up keep plans that hold for
-- any backlog.
--
-- Schema 33 found that PostgreSQL's generic plans, made after five calls of a PL/pgSQL
-- function in a session and kept until the table is analysed again, are made for an
-- empty table when the session's first calls met one (autovacuum analyses jobs_live
-- once a drain has emptied it), and that such a plan reads the whole table. Two row
-- triggers fired by a worker's writes are PL/pgSQL and look rows up by key:
--   * jobs_supersede_returning (schema 8; a job with an idempotency key back to pending,
--     by a retry, a snooze or a give-back): the live job that holds the key
--     (jobs_key_held_idx), else the key's row in job_idempotency_keys (its primary key).
--     Measured (PostgreSQL 16, one session): a worker session whose first retries of
--     keyed jobs met an empty queue, then 200,000 keyed jobs enqueued: each retry's write
--     took 25-44 ms (the trigger's plan a sequential scan of jobs_live), against 1.5 ms for
--     a session that planned it then, and 1.2-1.9 ms with sequential scans off;
--   * jobs_spawn_with_outcome (schemas 15 and 21; a step's successful outcome carrying
--     what its handler spawned): its step by job (jobq_workflow_steps_job_idx) and its
--     open edges by parent (the edges' primary key), whose tables hold every retained
--     workflow.
-- Their reads are probes of a key. Sequential scans off is not enough: a plan made for
-- an empty table then reads a whole index instead (one kept that way read all 5,028
-- steps for one spawn in a CI run). A bitmap scan needs an index condition, so with
-- index scans off and bitmap scans on every read is a probe by the statement's keys, as
-- in the workflow functions of schema 31 (and JIT off, as wherever a plan type is:
-- schema 33).
ALTER FUNCTION jobs_supersede_returning()
    SET enable_seqscan = off SET enable_indexscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = on
    SET enable_tidscan = off SET jit = off;
ALTER FUNCTION jobs_spawn_with_outcome()
    SET enable_seqscan = off SET enable_indexscan = off SET enable_indexonlyscan = off SET enable_bitmapscan = on
    SET enable_tidscan = off SET jit = off;
