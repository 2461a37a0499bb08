-- jobq schema 29: a claim writes two index entries fewer.
--
-- The live partition's listing indexes (schema 13's jobs_live_created_idx and
-- jobs_live_type_created_idx) held every live row. A claim changes a row's status, a
-- column of several indexes' predicates, so PostgreSQL writes the claimed row as a new
-- version with an entry in every index whose predicate it meets: four for a plain job
-- (the primary key, the heartbeat index and these two), and four more when it starts,
-- at each heartbeat (the outcome's move to jobs_finished writes that partition's four).
-- One session claiming 500 and completing the last batch in one transaction, 20,000 noop
-- jobs, six rounds each way taking turns: 41 µs of server CPU a job with these two
-- indexes partial against 44 whole (and 34 against 38 with them dropped, in a faster
-- half hour); the peer harness's drain, nine pairs taking turns, 9 % faster at W = 2 and
-- 7 % at W = 8 (medians; benchmark/README.md, "Schema 29").
--
-- Now they hold the pending rows only. The listing (jobq.store.sql.ledger.JOB_LIST_PAGE)
-- reads newest first in two parts: every row but the in-flight ones along these
-- indexes and the finished partitions' (the predicate below, spelt as the listing spells
-- it, so the planner matches the two), and the in-flight rows (claimed or running: at
-- most what the workers hold) through jobs_inflight_heartbeat_idx, sorted; then merges
-- the two. A listing of the previous release still runs, sorting the live partition
-- instead of walking an index: slower on a large backlog, the same rows.
--
-- Rebuilt in this migration's transaction: writes to jobs wait for it (schema 11's
-- rebuild of the same kind took about 1.6 s a million rows on a 2-core machine).
DROP INDEX jobs_live_created_idx, jobs_live_type_created_idx;
CREATE INDEX jobs_pending_created_idx ON jobs_live (created_at) WHERE status NOT IN ('claimed', 'running');
CREATE INDEX jobs_pending_type_created_idx ON jobs_live (type, created_at) WHERE status NOT IN ('claimed', 'running');
