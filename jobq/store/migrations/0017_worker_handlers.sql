-- jobq schema 17: a worker says which job types it has handlers for, and whether it
-- serves every queue (jobq worker --all-queues), so that operators see jobs no live
-- worker can run ("no handler": a typo'd type, a module not deployed) and what such a
-- worker serves. NULL handler_types: a worker of an older release, which did not say.
ALTER TABLE workers
    ADD COLUMN handler_types text[],
    ADD COLUMN all_queues boolean NOT NULL DEFAULT false;
