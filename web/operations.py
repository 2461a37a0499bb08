"""Bulk operations: ``POST /jobs/bulk`` (one action on every job matching a filter),
``POST /dead-letter/groups/{group_id}/replay`` and ``/discard`` (on every waiting
letter of a group), and ``GET /operations/{id}`` to follow one.

A real run answers 202 at once with the operation, recorded and owned by a thread of
this process (:func:`jobq.jobs.operations.start_in_background`); if the process goes away
first (a deploy), the daemon's maintenance leader finishes it. Each is audited under
the request's actor.
"""

from __future__ import annotations

from jobq.jobs import operations as ops
from web import jsonio
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.schemas import BulkRequest, DeadLetterGroupPath, DryRunOut, Error, OperationOut, OperationPath, ValidationFailure

# Two blueprints: /jobs/bulk takes a JSON body (checked before validation, as /jobs
# does); the group actions take none.
bulk = resource("bulk", __name__, "One action on every job matching a filter")
bulk.before_request(jsonio.require_json_body)
operations = resource("operations", __name__, "Bulk operations: following one; acting on a dead-letter group")


@bulk.post(
    "/jobs/bulk",
    responses={200: DryRunOut, 202: OperationOut, 400: Error, 413: Error, 415: Error, 422: ValidationFailure},
)
def bulk_action(body: BulkRequest) -> tuple[dict, int]:
    """Act on every job matching the filter, in chunks of 1,000 rows a transaction,
    skipping (and counting) rows not eligible or held by a worker. 202 with the
    operation, carried out in the background (GET /operations/{id}); with dry_run,
    200 with how many jobs match, changing nothing."""
    if body.dry_run:
        with api().database.connection() as conn:
            return {"matched": ops.count(body.filter, conn=conn), "dry_run": True}, 200
    operation = ops.start_in_background(
        api().settings.require_database_url(), body.action,
        actor=_actor(), job_filter=body.filter, priority=body.priority,
    )
    return operation.to_dict(), 202


@operations.get("/operations/<int:operation_id>", responses={200: OperationOut, 400: Error, 404: Error})
def get_operation(path: OperationPath) -> dict:
    """One bulk operation: its state and counts so far."""
    with api().database.connection() as conn:
        return ops.get(path.operation_id, conn=conn).to_dict()


GROUP_RESPONSES = {202: OperationOut, 400: Error, 404: Error}


@operations.post("/dead-letter/groups/<group_id>/replay", responses=GROUP_RESPONSES)
def replay_group(path: DeadLetterGroupPath) -> tuple[dict, int]:
    """Replay every waiting letter of a group (a new pending job each), as one bulk
    operation: 202 with it. 404 for a group never seen."""
    return _group_action(path.group_id, "replay")


@operations.post("/dead-letter/groups/<group_id>/discard", responses=GROUP_RESPONSES)
def discard_group(path: DeadLetterGroupPath) -> tuple[dict, int]:
    """Delete every waiting letter of a group for good, as one bulk operation: 202 with
    it. 404 for a group never seen."""
    return _group_action(path.group_id, "discard")


def _group_action(group_id: str, action: str) -> tuple[dict, int]:
    operation = ops.start_in_background(
        api().settings.require_database_url(), action, actor=_actor(), dead_letter_group=group_id
    )
    return operation.to_dict(), 202


def _actor() -> str:
    with api().database.connection() as conn:
        return request_actor(conn)

