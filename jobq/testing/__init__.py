"""Testing code that uses jobq, in the application's own pytest suite.

The pytest plugin (the ``pytest_jobq`` module, registered under ``pytest11``: loaded
in every pytest run of an environment with jobq, so it imports none of this until a
fixture is used) gives the fixtures ``jobq_database`` (a migrated throwaway database,
jobq's default connection pointed at it for the test) and ``jobq_drain`` (runs every
due job in the test's process: :func:`drain`). The helpers :func:`assert_enqueued` and
:func:`enqueued_jobs` read what the test's code enqueued.
"""

from jobq.testing.drain import Ran, drain
from jobq.testing.enqueued import assert_enqueued, enqueued_jobs

__all__ = ["Ran", "assert_enqueued", "drain", "enqueued_jobs"]
