"""A backlog that arrived while the planner was not told: a worker that sees one has
jobs_live analysed at once instead of leaving it to the maintenance leader's next look.

The statistics of jobs_live are taken by autovacuum, often right after a queue drained
(they then say it is empty), or never, on a database just migrated. A burst that
arrives next is planned on them: the batch's outcome statement and the claim joined
their hundreds of ids by a nested loop (a whole scan of the batch per row, or of
jobs_live's whole heap), and two workers drained 6,000-9,000 jobs a second instead of
about 33,000 until the leader's next look, up to five seconds later (benchmark/README.md,
"A burst the planner was not told of").

So when a claim comes back full at BACKLOG_CLAIM jobs or more after one that came back
short (the first batches of a burst), the worker asks once, in one query, whether
the planner's count is far short of the jobs live (:func:`jobq.store.statistics.analyse_if_stale`)
and, if so, analyses jobs_live itself; an ANALYZE under way elsewhere (another worker's,
autovacuum's) is not waited for (SKIP_LOCKED). A drain that keeps its claims full asks
nothing more until a claim comes back short again.
"""

from __future__ import annotations

from jobq.daemon.worker.session import ClaimSession
from jobq.store import statistics

BACKLOG_CLAIM = 256  # jobs in a claim that make the plans of a batch matter


class BacklogWatch:
    def __init__(self) -> None:
        self.armed = True  # a claim came back short since the last look (or none was made)

    def claimed(self, session: ClaimSession, got: int, asked: int) -> None:
        """After each claim: ``got`` jobs of the ``asked``."""
        if got < asked:
            self.armed = True
        elif self.armed and got >= BACKLOG_CLAIM:
            self.armed = False
            session.run(lambda conn, _: statistics.analyse_if_stale(conn))
