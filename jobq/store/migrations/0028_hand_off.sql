-- jobq schema 28: a job handed by its enqueue to a worker that waits for one.
--
-- Until now a job enqueued for an idle worker took two commits before its handler ran:
-- the enqueue's (a pending row, a notification) and then the woken worker's claim (the
-- row claimed under a new lease), 0.7 ms of the wake-up's 1.5 on this project's machine
-- (benchmark/README.md, "A job handed to a waiting worker"). Now a worker that found
-- nothing to claim says so on its row, and the enqueue of one job takes such a worker
-- and claims the job for it in the enqueue's own statement: the row goes in as
-- 'claimed', with the worker's id and a new lease, in the enqueue's transaction, and a
-- notification on the hand-off channel names the worker, the job and the lease. The
-- worker reads the row by id and lease and runs it: no claim, no second commit.
--
-- * workers.waiting_since: when the worker's last claim found nothing (its claim
--   statement sets it, and clears it when a claim takes jobs); NULL: not waiting, or a
--   worker that takes no hand-offs (JOBQ_HAND_OFF=0, or a previous release, whose
--   claims never set it). The enqueue clears it as it hands a job over: a waiting worker
--   is handed one job, then claims as any worker does.
-- * jobq_hand_channel(): the wake-up channel's name followed by '.hand', a channel of
--   its own so that the workers of the previous release (who parse '<queue> <jobs>' on
--   the wake-up channel) never read a hand-off. Payload '<job id> <lease> <worker id>'.
--
-- Which enqueues hand a job over is the code's (jobq.store.sql.enqueue.JOB_INSERT_HANDED):
-- one job at a time, due now, without an idempotency key or a concurrency key, of a queue
-- neither paused nor limited, while jobq.notify is not 'off'. Every other job goes in
-- pending, as before. The exactly-once protocol is unchanged: the job is claimed under a
-- lease in a committed transaction before anyone is told, the worker's row lock (FOR
-- UPDATE SKIP LOCKED) lets one enqueue take a waiting worker, and a job handed to a worker
-- that never reads it (its connection lost, the process killed) is recovered as any
-- claimed job of that worker is: by the worker itself (it looks for jobs claimed in its
-- name that it does not hold after a wait that no notification ended), by its
-- supervisor when the process dies, or by the reaper once its heartbeat is stale.

ALTER TABLE workers ADD COLUMN waiting_since timestamptz;

CREATE FUNCTION jobq_hand_channel() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jobq_wake_channel() || '.hand'
$$;
