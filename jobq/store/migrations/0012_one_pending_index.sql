-- jobq schema 12: one index of pending jobs instead of two.
--
-- jobs_pending_run_at_idx (queue, run_at) answered "when is the next pending job of this
-- queue due" (an idle worker's timer, the oldest-due metric, the count of scheduled
-- jobs) with one probe. The claim index (queue, priority DESC, run_at, id) answers the
-- same with one probe per priority: within a (queue, priority) its order is run_at's
-- (jobq.store.sql.fragments.EACH_PRIORITY). Every new job paid the second index an entry; without it,
-- a 1,000-job enqueue_many costs the server about 1-2 us a job less (of 15 in all, on
-- PostgreSQL 15), and each single insert opens one index fewer.
DROP INDEX jobs_pending_run_at_idx;
