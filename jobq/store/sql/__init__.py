"""jobq's DML, as named constants, one module per table or noun.

Where a statement lives (each module's docstring names the modules that run it):

- :mod:`~jobq.store.sql.enqueue`: jobs written by an enqueue (insert, COPY, ids reserved).
- :mod:`~jobq.store.sql.ledger`: jobs read (get, a listing's parts, counts of a filter).
- :mod:`~jobq.store.sql.control`: an operator's actions on jobs by id (cancel, delete,
  retry, run now).
- :mod:`~jobq.store.sql.leases`: the worker's protocol: claim, start, heartbeat,
  progress, re-lock; the reaper's hand-over of a gone worker's jobs.
- :mod:`~jobq.store.sql.outcomes`: the fenced outcomes of a lease (done, failed, released,
  cancelled, snoozed).
- :mod:`~jobq.store.sql.dead_letters`: dead letters and their groups.
- :mod:`~jobq.store.sql.operations`: bulk operations and their chunks.
- :mod:`~jobq.store.sql.queues`: paused queues, and the reads of pending jobs per queue.
- :mod:`~jobq.store.sql.schedules`: schedules, their firing and the jobs they insert.
- :mod:`~jobq.store.sql.workers`: worker rows.
- :mod:`~jobq.store.sql.counters`: the exact counters and their samples.
- :mod:`~jobq.store.sql.rollup`: the per-minute rollup.
- :mod:`~jobq.store.sql.partitions`: the partitions of the finished jobs, and their retention.
- :mod:`~jobq.store.sql.statistics`: the planner's statistics of jobs (ANALYZE).
- :mod:`~jobq.store.sql.audit`: the audit log and its key.
- :mod:`~jobq.store.sql.migrations`: the record of applied migrations and their lock.
- :mod:`~jobq.store.sql.database`: the database's clock and ping, the leader's lock, the
  listing of advisory locks.
- :mod:`~jobq.store.sql.fragments`: the pieces several modules build on (column lists,
  LIVE, the keyed insert, OPEN_QUEUES, EACH_PRIORITY).

Names are Entity + Verb + Qualifier, the entity singular (``JOB_CLAIM``,
``DEAD_LETTER_GROUP_GET``, ``COUNTER_SAMPLE_TAKE``); a write says in its name what it is
guarded by (``JOB_COMPLETE_IF_LEASED``, ``QUEUE_RESUME_IF_PAUSED``). A statement lives in
the module of its table or noun, which is not always its entity: ``JOB_CLAIM`` in
``leases``, ``JOB_INSERT_SCHEDULED`` in ``schedules``. Each constant has a comment on the
lock it takes, the index it uses and its guard. Import the constants themselves
(``from jobq.store.sql.leases import JOB_CLAIM``); this ``__init__`` holds no code.

Values always travel as placeholders (``%(name)s``). Array parameters go in binary
(``%(name)b``): a text array literal costs the client a regular-expression escape of
every element (40 % of the Python time of a 1,000-job enqueue_many, 8 % of a worker's).
A few constants are fragments (a listing's SELECT, count, filters and ORDER BY; a bulk
operation's chunk; the DDL templates of a partition) that :mod:`jobq.jobs.ledger`,
:mod:`jobq.jobs.filters`, :mod:`jobq.jobs.operations`, :mod:`jobq.jobs.dead_letters` and
:mod:`jobq.store.partitions` put together with ``psycopg.sql``: names and a claim's size
through ``psycopg.sql``, never an f-string. The reads behind the metrics, the dashboard
and ``jobq inspect`` are each bounded whatever the size of jobs.

The advisory key of job ``id`` is ``%(lock_base)s | id``, where ``lock_base`` is the
namespace shifted into the high 16 bits (see :mod:`jobq.store.locks`); a job's lock
rides in its claim and outcome statements, the leader's, the migrations' and the
operations' stand alone.

DDL lives in the numbered files of ``jobq/store/migrations``, with one exception:
``jobq.store.migrate.MIGRATIONS_TABLE_CREATE``, which creates ``jobq_migrations`` itself,
because the table that records migrations cannot be created by a migration.

The modules import nothing from jobq but :mod:`jobq.spec` and each other, downward
(:mod:`~jobq.store.sql.fragments` at the bottom). They are run by the library's
modules (:mod:`jobq.jobs`, :mod:`jobq.observe`, :mod:`jobq.schedules`, :mod:`jobq.store`)
and the daemon's; routes, the CLI and everything else call those modules; tests may run
a statement directly to set up a row or to ``EXPLAIN`` it.
"""
