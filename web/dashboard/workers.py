"""``/dashboard/workers``: every worker process: host, pid, queues, the job it runs and
for how long, its heartbeat's age, the jobs it has done (:mod:`jobq.observe.workers`)."""

from __future__ import annotations

from jobq.observe.workers import list_workers
from web.dashboard import common
from web.dashboard.blueprints import pages


@pages.get("/workers")
def workers() -> str:
    with common.database() as conn:
        listed = list_workers(conn=conn)
    return common.page("workers.html", "Workers", workers=listed, stale=common.stale_seconds())
