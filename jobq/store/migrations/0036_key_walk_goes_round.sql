-- jobq schema 36: the claim under limits' walk of the keys goes round them all, a part at
-- each claim, instead of reading the same first keys every time.
--
-- Found with 1,000 keys at concurrency 1, each key's slot held by a long run and ten due
-- jobs behind each, and one job of a key whose slot was free, last in key order
-- ("held:new" after "held:999"): idle workers claimed again and again and never took it.
-- Schema 33's claim reads its first 200 due jobs (all of full keys here), then walks the
-- keys (jobq_key_heads from the first key, up to 200 keys not decided by that read) and
-- takes nothing more: every claim walked the same first 400 keys, and a free key beyond
-- them waited until enough keys before it in claim order had drained, with workers idle.
-- The walk still reads at most that many keys, but a walk that starts nowhere in
-- particular (after NULL: the claim's second pass, or a fair queue's first turn) now
-- starts where this session's last such walk of the queue stopped, and goes round to the
-- first keys after the last: a key with room is found within a few claims however many
-- full keys come before it. Where the session stopped is kept in two settings of its
-- own (jobq.key_walk_queue, jobq.key_walk_key: no table written, nothing shared between
-- workers, each of which starts from the first key); a walk that went all the way round
-- starts from the first key again. Everything else is schema 33's walk.
CREATE OR REPLACE FUNCTION jobq_key_heads(q text, after text, n integer, scan integer, skip text[])
RETURNS TABLE (id bigint, concurrency_key text, priority smallint, run_at timestamptz) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off AS $$
#variable_conflict use_column
DECLARE
    start text := coalesce(after, CASE WHEN current_setting('jobq.key_walk_queue', true) = q
                                       THEN nullif(current_setting('jobq.key_walk_key', true), '') END);
    k text := coalesce(start, '');
    nxt text;
    walked integer := 0;
    wrapped boolean := false;
BEGIN
    RETURN QUERY SELECT s.id, NULL::text, s.priority, s.run_at FROM (
        SELECT j.id, j.concurrency_key, j.priority, j.run_at FROM jobs AS j
        WHERE j.status = 'pending' AND j.queue = q AND j.run_at <= now()
        ORDER BY j.priority DESC, j.run_at, j.id LIMIT scan) AS s WHERE s.concurrency_key IS NULL LIMIT 1;
    WHILE walked < n LOOP
        nxt := (SELECT j.concurrency_key FROM jobs AS j WHERE j.status = 'pending' AND j.queue = q
                AND j.concurrency_key IS NOT NULL AND j.concurrency_key > k ORDER BY j.concurrency_key LIMIT 1);
        IF nxt IS NULL THEN
            EXIT WHEN wrapped;
            wrapped := true;  -- round to the first keys, up to where the walk started
            k := '';
            CONTINUE;
        END IF;
        EXIT WHEN wrapped AND nxt > coalesce(start, '');
        k := nxt;
        CONTINUE WHEN k = ANY(skip);
        walked := walked + 1;
        RETURN QUERY SELECT j.id, j.concurrency_key, j.priority, j.run_at FROM jobs AS j
            WHERE j.status = 'pending' AND j.queue = q AND j.concurrency_key >= k AND j.concurrency_key <= k
            AND j.run_at <= now() ORDER BY j.concurrency_key, j.priority DESC, j.run_at, j.id LIMIT 1;
    END LOOP;
    IF after IS NULL THEN  -- the next such walk of this session starts after the last key read
        PERFORM set_config('jobq.key_walk_queue', q, false),
                set_config('jobq.key_walk_key', CASE WHEN walked < n THEN '' ELSE k END, false);
    END IF;
END
$$;
