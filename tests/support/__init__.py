"""What the tests share besides their fixtures (those are in tests/conftest.py).

- ``db``: the test servers and databases (one database per test process), and reading
  the server's views (pg_locks, pg_stat_activity) for this database only;
- ``rows``: the row factory, jobs and dead letters seeded by SQL in any status;
- ``claims``: claiming and recording outcomes in the test process, as a worker does;
- ``waiting``: ``wait_for``, polling a condition until a deadline;
- ``daemon``: the real ``jobq worker`` as a subprocess;
- ``api``, ``web_server``, ``browser``: the API's checks, a real Gunicorn, headless Chromium;
- ``cli``: ``python -m jobq`` as a subprocess; ``ports``: a free loopback port;
- ``handlers``, ``schedules``: modules that the workers the tests start import through
  ``JOBQ_HANDLERS`` (``support.handlers``), finding ``tests/`` on PYTHONPATH.

This file imports nothing, so that a worker importing ``support.handlers`` loads only that.
"""
