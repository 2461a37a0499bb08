-- jobq schema 19: a cancelled job whose handler had already finished keeps its result.
--
-- A handler's success waits in its worker's buffer for a few milliseconds before it is
-- written (jobq.daemon.worker.flight: FLUSH_AFTER); an operator's cancel committed in
-- between wins (it replaces the lease, and the worker's write is refused). The job
-- stays cancelled, but the worker then writes the result it had onto the cancelled row
-- and when its handler had finished (JOB_NOTE_FINISHED_IF_CANCELLED): the work was done,
-- and the operator sees it (the API, the dashboard's job page). NULL on every other row.
ALTER TABLE jobs ADD COLUMN handler_finished_at timestamptz;
