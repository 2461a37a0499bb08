"""The request and response models of ``/queues`` and ``/dead-letter/groups`` (kept apart
from web/schemas.py, which holds the job ledger's). Request models validate exactly what
:mod:`jobq.jobs.queues` accepts; response models only document."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from jobq.jobs.queues import MAX_REASON_LENGTH
from jobq.spec import MAX_QUEUE_LENGTH, check_text
from web.schemas import LOCATIONS, Parameters

# ---------------------------------------------------------------------------------------
# Requests


class QueuePath(Parameters):
    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUEUE_LENGTH), AfterValidator(check_text)]


class PauseBody(BaseModel):
    """Why the queue is paused (optional; the POST may also come without a body)."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[StrictStr, Field(max_length=MAX_REASON_LENGTH), AfterValidator(check_text)] | None = None


class DeadLetterGroupQuery(Parameters):
    limit: int = Field(100, ge=1, le=1000)


# Bad path and query parameters answer 400 naming them (web.errors.validation_response).
LOCATIONS.update({QueuePath.__name__: "path", PauseBody.__name__: "body", DeadLetterGroupQuery.__name__: "query"})

# ---------------------------------------------------------------------------------------
# Responses


class QueueOut(BaseModel):
    name: str
    paused: bool
    paused_at: datetime | None
    paused_by: str | None
    reason: str | None
    depth: dict[str, int] = Field(description="Jobs in each of the seven statuses now (exact).")
    workers: int = Field(description="Live worker processes serving the queue.")
    oldest_pending_age_seconds: float | None = Field(
        description="How long the oldest due pending job has been due; null when none is due."
    )


class QueueList(BaseModel):
    queues: list[QueueOut]


class QueueChange(BaseModel):
    """The queues named and those whose state changed (a queue already paused, or not
    paused, is left as it was)."""

    queues: list[str]
    changed: list[str]
    unknown: list[str] = Field(description="Queues no job, pause, worker or schedule had named before: a typo?")
    warning: str | None = Field(None, description="Present when ``unknown`` is not empty.")


class DeadLetterGroupOut(BaseModel):
    id: str = Field(description="Opaque: a hash of the type and the signature.")
    type: str
    signature: str = Field(description="The exception's line, numbers, ids and hex normalised.")
    count: int = Field(description="Dead letters of the group waiting (not replayed).")
    first_seen: datetime
    last_seen: datetime
    example_id: int = Field(description="The newest dead letter of the group.")


class DeadLetterGroupList(BaseModel):
    groups: list[DeadLetterGroupOut]
