"""``/queues``: every queue known, with its depth and workers; pause and resume one.

``POST /queues/{name}/pause`` takes an optional JSON body (``{"reason": "..."}``): a
POST without a body pauses without a reason, and a body, when there is one, must be a
JSON object (415 for another content type, 400 for text that is not JSON, 422 for a
bad field), as on the routes of :mod:`web.jobs`. Each pause and resume is recorded in
the audit trail under the request's actor.
"""

from __future__ import annotations

from flask import request

from jobq.jobs import queues as library
from web import jsonio
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.schemas import Error, ValidationFailure
from web.schemas_queues import PauseBody, QueueChange, QueueList, QueuePath

queues = resource("queues", __name__, "Queues: list them, pause and resume them")

PAUSE_BODY = {
    "requestBody": {
        "required": False,
        "description": "Optional: why the queue is paused.",
        "content": {"application/json": {"schema": PauseBody.model_json_schema()}},
    }
}


@queues.get("/queues", responses={200: QueueList})
def list_queues() -> dict:
    """Every queue known (from the counters, the paused queues and the live workers),
    with its pause, depth per status, live workers and oldest due pending job."""
    with api().database.connection() as conn:
        listed = library.list_queues(stale_seconds=api().settings.stale_threshold, conn=conn)
    return {"queues": [queue.to_dict() for queue in listed]}


@queues.post(
    "/queues/<path:name>/pause",
    # 404: a name with a line break matches no route (Flask's path converter stops there)
    responses={200: QueueChange, 400: Error, 404: Error, 415: Error, 413: Error, 422: ValidationFailure},
    openapi_extensions=PAUSE_BODY,
)
def pause(path: QueuePath) -> dict:
    """Pause a queue (created if it has no row yet): no worker starts its jobs once this
    answers; enqueueing continues, running jobs finish. Pausing a paused queue changes
    nothing (``changed`` is empty). A queue no job, worker or schedule has ever named is
    paused too, listed in ``unknown`` with a ``warning``."""
    body = _pause_body()
    with api().database.connection() as conn:
        change = library.pause(path.name, reason=body.reason, actor=request_actor(conn), conn=conn)
    return _change(change)


@queues.post("/queues/<path:name>/resume", responses={200: QueueChange, 400: Error, 404: Error})
def resume(path: QueuePath) -> dict:
    """Resume a queue: idle workers are woken at once. Resuming a queue that is not
    paused changes nothing (``changed`` is empty); one no job, worker or schedule has
    ever named is listed in ``unknown`` with a ``warning``."""
    with api().database.connection() as conn:
        change = library.resume(path.name, actor=request_actor(conn), conn=conn)
    return _change(change)


def _change(change: library.Change) -> dict:
    answer: dict = {"queues": change.queues, "changed": change.changed, "unknown": change.unknown}
    if change.unknown:
        answer["warning"] = f"no job, worker or schedule has ever named queue {', '.join(change.unknown)}: a typo?"
    return answer


def _pause_body() -> PauseBody:
    """The optional body: none (an empty one) is no reason; anything else must be JSON."""
    if not request.get_data(cache=True):
        return PauseBody()
    jsonio.require_json_body()
    return PauseBody.model_validate(request.get_json())
