"""Flow control over HTTP: ``PATCH /queues/{name}`` changes a queue's limits; ``/limits``
lists every rule on keys and every limited queue with its use now, ``PUT`` and
``DELETE /limits/{pattern}`` (URL-encoded: ``tenant%3A%2A``) set and remove a rule.
Each change is recorded in the audit trail under the request's actor, by
:mod:`jobq.limits`, which checks every value (400 naming the field)."""

from __future__ import annotations

from flask import request
from werkzeug.exceptions import UnsupportedMediaType

from jobq.limits import rules
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.schemas import Error, ValidationFailure
from web.schemas_limits import KeyRuleOut, LimitBody, LimitCleared, LimitList, LimitPath, QueueLimitsBody, QueueLimitsOut
from web.schemas_queues import QueuePath

limits = resource("limits", __name__, "Flow control: concurrency and rate limits per queue and per concurrency key")

BODY_ERRORS = {400: Error, 404: Error, 415: Error, 422: ValidationFailure}


@limits.before_request
def _json_body() -> None:
    """A PATCH or PUT carries a JSON object (415 otherwise, as a POST of /jobs)."""
    if request.method in ("PATCH", "PUT") and not request.is_json:
        raise UnsupportedMediaType("the body must be JSON (Content-Type: application/json)")


@limits.patch("/queues/<path:name>", responses={200: QueueLimitsOut, **BODY_ERRORS})
def set_queue_limits(path: QueuePath, body: QueueLimitsBody) -> dict:
    """Change a queue's limits: the fields given change, null removes a limit. Workers
    apply it within a second."""
    given = {name: getattr(body, name) for name in body.model_fields_set}
    with api().database.connection() as conn:
        changed = rules.set_queue_limits(path.name, **given, actor=request_actor(conn), conn=conn)
        listed = {q.queue: q for q in rules.queue_limits(conn=conn)}
    return listed.get(changed.queue, changed).to_dict()


@limits.get("/limits", responses={200: LimitList})
def list_limits() -> dict:
    """Every rule on keys and every queue with a limit, each with its use now."""
    with api().database.connection() as conn:
        return {
            "rules": [rule.to_dict() for rule in rules.list_limits(conn=conn)],
            "queues": [queue.to_dict() for queue in rules.queue_limits(conn=conn)],
        }


@limits.put("/limits/<path:pattern>", responses={200: KeyRuleOut, **BODY_ERRORS})
def set_limit(path: LimitPath, body: LimitBody) -> dict:
    """Create or replace the rule on a pattern (a key, or a prefix ending in `*`)."""
    with api().database.connection() as conn:
        rule = rules.set_limit(path.pattern, concurrency=body.concurrency, rate=body.rate,
                               actor=request_actor(conn), conn=conn)
    return rule.to_dict()


@limits.delete("/limits/<path:pattern>", responses={200: LimitCleared, 400: Error})
def clear_limit(path: LimitPath) -> dict:
    """Remove the rule on a pattern; jobs running under it keep their slots until they end."""
    with api().database.connection() as conn:
        return {"pattern": path.pattern, "cleared": rules.clear_limit(path.pattern, actor=request_actor(conn), conn=conn)}
