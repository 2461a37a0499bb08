-- jobq schema 32: a workflow's steps and edges are updated in place.
--
-- Each edge is written twice in its life (inserted with its workflow, settled with its
-- parent's outcome and result) and each step's count of parents left once or more
-- (counted down, or set to 0 by its last parent). Their tables were filled to the brim
-- by the workflow's enqueue, so about half of those updates found no room on the row's
-- page: a new version elsewhere, with a new entry in each of the table's two indexes.
-- Measured (a fan-out 1 -> 10,000 -> 1 on PostgreSQL 16, pg_stat_user_tables): 8,526 of
-- 20,000 edge updates and 4,691 of 10,210 step updates were HOT (no index written).
-- Pages left half empty (steps) or 60 % empty (edges: a settled edge is larger than a
-- new one, its outcome and result filled in) take every one of them in place: 20,000 of
-- 20,000 and 10,027 of 10,027 in the same run. The fan-out/fan-in took 626-721 ms
-- against 787-855 ms, three runs each taking turns (benchmark/README.md, "Schema 32"),
-- the root's release of its 10,000 children 272-290 ms against 353-370.
--
-- The price is space: these tables take about twice the pages for the same rows (a
-- workflow's rows are deleted with it). Only pages written from now on are affected;
-- ALTER TABLE ... SET (fillfactor) takes no lock that stops reads or writes.
ALTER TABLE jobq_workflow_steps SET (fillfactor = 50);
ALTER TABLE jobq_workflow_edges SET (fillfactor = 40);
