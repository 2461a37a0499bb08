-- jobq schema 14: the channel that wakes idle workers, named in one place.
--
-- jobq_wake (schema 1) notified on a channel spelt inside its body, and the workers'
-- listener (jobq.daemon.listener) spelt it again. Now the name lives in
-- jobq_wake_channel() alone: jobq_wake notifies on it, and a listener asks it before
-- its LISTEN. The channel and the payload ('<queue> <jobs>') are unchanged, so a
-- worker of the previous release, listening on 'jobq', hears every wake-up.
--
-- Who calls jobq_wake: the counters' statement-level triggers on jobs (after INSERT,
-- the rows inserted pending; after UPDATE, the rows pending after the statement: a
-- retry, a release, a snooze, a reclaim), each with one notification per queue, and
-- the queue-resume statement (the pending jobs of each queue resumed). Identical
-- notifications within a transaction collapse into one.
CREATE FUNCTION jobq_wake_channel() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 'jobq' $$;

CREATE OR REPLACE FUNCTION jobq_wake(queues text[], counts bigint[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('jobq.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify(jobq_wake_channel(), q || ' ' || n) FROM unnest(queues, counts) AS u(q, n);
    END IF;
END
$$;
