"""``/dashboard/operations/<id>``: a bulk operation as it goes (:mod:`jobq.jobs.operations`)."""

from __future__ import annotations

from jobq.jobs import operations
from web.dashboard import common
from web.dashboard.blueprints import pages


@pages.get("/operations/<int:operation_id>")
def operation(operation_id: int) -> str:
    with common.database() as conn:
        found = operations.get(operation_id, conn=conn)
    return common.page("operation.html", f"Operation {operation_id}", operation=found)
