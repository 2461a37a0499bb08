-- jobq schema 8: an idempotency key held for a scope (unique_while) instead of for as
-- long as its job's row exists.
--   'always'  while the row exists (the behaviour before this schema, and the default);
--   'active'  while the job is pending, claimed or running;
--   'pending' while the job is pending (waiting to run, or to be retried).
-- Keys share one namespace: one partial unique index whose predicate is "the row holds
-- its key now", whatever the row's scope, so that a key held in any scope blocks a
-- newcomer in any scope, and ON CONFLICT names exactly one arbiter. A constant default:
-- no rewrite of existing rows (their keys stay 'always', as they were).
ALTER TABLE jobs ADD COLUMN unique_while text NOT NULL DEFAULT 'always'
    CONSTRAINT jobs_unique_while_check CHECK (unique_while IN ('pending', 'active', 'always'));

-- The predicate below is spelt exactly as jobq.store.sql.enqueue.KEY_HELD (ON CONFLICT
-- infers the index from it).
CREATE UNIQUE INDEX jobs_key_held_idx ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
      AND (unique_while = 'always' OR status = 'pending' OR (unique_while = 'active' AND status IN ('claimed', 'running')));
DROP INDEX jobs_idempotency_key_idx;

-- A job coming back to pending (a retry, a snooze, a reclaim, a give-back, or an
-- operator's UPDATE) whose key another job took while it was out of its scope would
-- hold the key twice: it ends cancelled instead, superseded by the job that holds the
-- key (that job already stands for the same work). Each statement in a trigger sees
-- what is committed when it runs; a holder still uncommitted at that instant makes
-- the update fail with a unique violation once it commits, and the writer retries.
CREATE FUNCTION jobs_supersede_returning() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    holder bigint;
BEGIN
    SELECT id INTO holder FROM jobs
    WHERE idempotency_key = NEW.idempotency_key AND id <> NEW.id
      AND (unique_while = 'always' OR status = 'pending' OR (unique_while = 'active' AND status IN ('claimed', 'running')))
    LIMIT 1;
    IF holder IS NOT NULL THEN
        NEW.status := 'cancelled';
        NEW.completed_at := now();
        NEW.cancelled_by := 'jobq';
        NEW.error := 'superseded by job ' || holder;
    END IF;
    RETURN NEW;
END $$;

-- Only returns of keyed jobs whose scope they may have left ('always' never leaves it).
CREATE TRIGGER jobs_supersede_returning BEFORE UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status <> 'pending' AND NEW.idempotency_key IS NOT NULL
          AND NEW.unique_while <> 'always')
    EXECUTE FUNCTION jobs_supersede_returning();
