-- jobq schema 18: an install in a schema of its own, and the trace context of a job.
--
-- JOBQ_SCHEMA puts every jobq object in one schema: `jobq migrate` creates it and runs
-- every migration (0001 on) with that schema alone on its search_path, so that each
-- CREATE lands there. Two installs in one database are then independent, and what
-- PostgreSQL shares across schemas is derived from the schema here:
--
-- * the channels. jobq_wake_channel() (schema 14) and jobq_control_channel() (new: the
--   operators' actions, spelt 'jobq_control' in three statements until now) are
--   'jobq' and 'jobq_control' for an install in public, as before, so that an existing
--   install and the workers of the previous release hear every notification; in any
--   other schema they are 'jobq.<schema>' and 'jobq_control.<schema>'. Listeners ask
--   the functions before they LISTEN.
-- * the advisory namespace is the code's (jobq.settings.schema_namespace): a lock is
--   taken by a statement, never by a function of the schema's.
-- * the sequences live in the schema (jobs_id_seq, jobs_lease_seq), as the tables do.
--
-- Every function jobq defines runs with its own search_path (the schema it lives in,
-- then pg_temp): a trigger fired by an application's session resolves jobq's names in
-- jobq's schema, never through the application's search_path (an install in public is
-- left as it was: a pinned function switches search_path at each call, which the wake-up
-- path measurably pays; public is on every default search_path). jobq_functions_pin() sets
-- it on each function of the schema named jobq_*, jobs_* or dead_letter_jobs_* that has
-- not got it; this migration calls it, and `jobq migrate` calls it again after applying
-- any later file (a function a later migration creates gets it too).
--
-- The trace context: traceparent holds the W3C traceparent of the span that enqueued the
-- job (with the `otel` extra and a tracer provider configured), from the session's
-- setting jobq.traceparent, which jobq sets around its inserts under a span: every way of
-- inserting (INSERT, arrays, COPY, a schedule's) records it without naming the column.
-- NULL otherwise. The worker's consumer span is its child.
ALTER TABLE jobs ADD COLUMN traceparent text DEFAULT nullif(current_setting('jobq.traceparent', true), '');

DO $$
DECLARE
    suffix text := CASE WHEN current_schema() = 'public' THEN '' ELSE '.' || current_schema() END;
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION jobq_wake_channel() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::text', 'jobq' || suffix));
    EXECUTE format(
        'CREATE FUNCTION jobq_control_channel() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::text', 'jobq_control' || suffix));
END
$$;

CREATE FUNCTION jobq_functions_pin() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'search_path=' || quote_ident(current_schema()) || ', pg_temp';
    f regprocedure;
    pinned integer := 0;
BEGIN
    IF current_schema() = 'public' THEN
        RETURN 0;  -- an install in public is left as it was: no per-call search_path switch
    END IF;
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND (p.proname LIKE 'jobq\_%' OR p.proname LIKE 'jobs\_%' OR p.proname LIKE 'dead\_letter\_jobs\_%')
          AND NOT coalesce(p.proconfig, '{}') @> ARRAY[setting]
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        pinned := pinned + 1;
    END LOOP;
    RETURN pinned;
END
$$;

SELECT jobq_functions_pin();
