-- jobq schema 24: a fan-out/fan-in's statements stay linear in their batch.
--
-- Profiled (benchmark/README.md, "Schema 24"): since workers claim up to 500 jobs (issue
-- 38), a fan-in's outcome batch of 500 middle steps spent about 50 ms in
-- jobs_finished_after_update itself, against 0.5 ms in a session whose first such call
-- had 500 rows. PL/pgSQL keeps the plan of the trigger's join of its two transition
-- tables (old_jobs, new_jobs) from its first call in the session: a worker's first
-- step outcome is small (a root, a claim of 1, 2, 4 ... while its claim size grows), so
-- the join was planned as a nested loop for one row a side, and kept for 500 a side:
-- 250,000 tuplestore rows read per batch. The join is hashed now, whatever the first
-- call's size (a plan with no nested loop is linear for every size).
--
-- The setting holds for the function's whole call, the nested jobq_workflow_finished
-- included, whose own plans are nested loops of index probes (schema 22: its settings
-- turn every other join and the sequential scan off): it says so itself.

ALTER FUNCTION jobs_finished_after_update() SET enable_nestloop = off;
ALTER FUNCTION jobq_workflow_finished(bigint[], bigint[], text[], jsonb[], text[], boolean[]) SET enable_nestloop = on;
