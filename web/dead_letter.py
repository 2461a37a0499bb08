"""``/dead-letter``: the jobs that ran out of retries; read, replay, discard; and
``/dead-letter/groups``, the letters waiting grouped by cause."""

from __future__ import annotations

import jobq
from jobq.jobs.dead_letters import groups as dead_letter_groups
from web import jsonio
from web.context import api
from web.blueprints import resource
from web.schemas import DeadLetterListQuery, DeadLetterOut, DeadLetterPage, DeadLetterPath, Error, JobOut
from web.schemas_queues import DeadLetterGroupList, DeadLetterGroupQuery

dead_letter = resource("dead_letter", __name__, "Jobs that ran out of retries")

NOT_FOUND = {400: Error, 404: Error}


@dead_letter.get("/dead-letter", responses={200: DeadLetterPage, 400: Error})
def list_dead(query: DeadLetterListQuery) -> dict:
    """Dead-letter rows, newest first, optionally of one type, paginated."""
    with api().database.connection() as conn:
        return jsonio.page_dict(jobq.list_dead(**query.model_dump(), conn=conn))


# Declared before /dead-letter/<id> for the reader; the int converter would not take
# "groups" anyway.
@dead_letter.get("/dead-letter/groups", responses={200: DeadLetterGroupList, 400: Error})
def list_groups(query: DeadLetterGroupQuery) -> dict:
    """Dead letters waiting, grouped by job type and error signature (the exception's
    line with numbers, ids and hex normalised), the most recently seen group first."""
    with api().database.connection() as conn:
        return {"groups": [group.to_dict() for group in dead_letter_groups(limit=query.limit, conn=conn)]}


@dead_letter.get("/dead-letter/<int:dead_letter_id>", responses={200: DeadLetterOut, **NOT_FOUND})
def get_dead(path: DeadLetterPath) -> dict:
    """One dead-letter row."""
    with api().database.connection() as conn:
        return jobq.get_dead(path.dead_letter_id, conn=conn).to_dict()


@dead_letter.post("/dead-letter/<int:dead_letter_id>/replay", responses={201: JobOut, 409: Error, **NOT_FOUND})
def replay(path: DeadLetterPath) -> tuple[dict, int]:
    """Enqueue a new pending job from a dead-letter row (201); 409 if it was already replayed."""
    with api().database.connection() as conn:
        return jobq.replay(path.dead_letter_id, conn=conn).to_dict(), 201


@dead_letter.delete("/dead-letter/<int:dead_letter_id>", responses={204: None, **NOT_FOUND})
def discard(path: DeadLetterPath) -> tuple[str, int]:
    """Delete a dead-letter row for good."""
    with api().database.connection() as conn:
        jobq.discard_dead(path.dead_letter_id, conn=conn)
    return "", 204
