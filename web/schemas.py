"""The request and response models of the API, from which the OpenAPI document is made
(with the declarations of web/blueprints.py).

Request models validate (through flask-openapi3) exactly what the library accepts:
a ``POST /jobs`` body is a :class:`jobq.spec.JobSpec`. Response models only document:
they are derived from the library's row types, so a field added there shows here.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, create_model

from jobq.job import STATUSES, DeadLetter, Job
from jobq.ledger import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT
from jobq.metrics import Metrics
from jobq.spec import MAX_IDEMPOTENCY_KEY_LENGTH, MAX_QUEUE_LENGTH, MAX_TYPE_LENGTH, JobSpec, as_utc, check_text

MAX_BATCH = 1000

# ---------------------------------------------------------------------------------------
# Requests


class JobBody(JobSpec):
    """A job to enqueue. Unknown top-level fields are ignored, as the seed's FastAPI
    app ignored them, so that its clients keep working; every known field is strict."""

    model_config = ConfigDict(extra="ignore")


class JobBatch(BaseModel):
    """Jobs to enqueue together: all or none."""

    model_config = ConfigDict(extra="ignore")

    jobs: list[JobBody] = Field(max_length=MAX_BATCH, description=f"At most {MAX_BATCH} jobs.")


IdempotencyKey = Annotated[
    StrictStr, Field(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH), AfterValidator(check_text)
]


class Parameters(BaseModel):
    """A model of path, query or header parameters.

    flask-openapi3 asks such a model for its JSON schema on every request (to find
    list-valued fields), and building one costs more than the rest of a request: it
    is built once per model and arguments. Callers only read it.
    """

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _SCHEMAS:
            _SCHEMAS[key] = super().model_json_schema(*args, **kwargs)
        return _SCHEMAS[key]


_SCHEMAS: dict[tuple[Any, ...], dict[str, Any]] = {}


IDEMPOTENCY_KEY = "Idempotency-Key"


class EnqueueHeaders(Parameters):
    idempotency_key: IdempotencyKey | None = Field(
        None,
        alias=IDEMPOTENCY_KEY,
        description="A job already holding this key is returned (200) instead of a new one being added.",
    )


def _filter_text(max_length: int) -> Any:
    return Annotated[StrictStr, Field(max_length=max_length), AfterValidator(check_text)] | None


class PageQuery(Parameters):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    offset: int = Field(0, ge=0, le=MAX_ID)


class JobListQuery(PageQuery):
    status: Literal[STATUSES] | None = None  # type: ignore[valid-type]
    type: _filter_text(MAX_TYPE_LENGTH) = None  # type: ignore[valid-type]
    queue: _filter_text(MAX_QUEUE_LENGTH) = None  # type: ignore[valid-type]
    created_after: Annotated[datetime, AfterValidator(as_utc)] | None = Field(
        None, description="Strictly after; without an offset, UTC."
    )


class DeadLetterListQuery(PageQuery):
    type: _filter_text(MAX_TYPE_LENGTH) = None  # type: ignore[valid-type]


class JobPath(Parameters):
    job_id: int = Field(ge=1, le=MAX_ID)


class DeadLetterPath(Parameters):
    dead_letter_id: int = Field(ge=1, le=MAX_ID)


# Where each request model is read from, as a 422's ``loc`` names it; errors in path
# and query parameters answer 400 instead.
LOCATIONS = {
    JobBody.__name__: "body",
    JobBatch.__name__: "body",
    EnqueueHeaders.__name__: "header",
    JobListQuery.__name__: "query",
    DeadLetterListQuery.__name__: "query",
    JobPath.__name__: "path",
    DeadLetterPath.__name__: "path",
}

# ---------------------------------------------------------------------------------------
# Responses


def _model_of(row_type: type, name: str) -> type[BaseModel]:
    """A pydantic model with the public fields of a jobq dataclass, as ``to_dict`` gives them."""
    hints = get_type_hints(row_type)
    fields: dict[str, Any] = {
        field.name: (hints[field.name], ...)
        for field in dataclasses.fields(row_type)
        if not field.metadata.get("private")
    }
    return create_model(name, **fields)


JobOut = _model_of(Job, "Job")
DeadLetterOut = _model_of(DeadLetter, "DeadLetter")
MetricsOut = _model_of(Metrics, "Metrics")


def _page_of(item: type[BaseModel], name: str) -> type[BaseModel]:
    items = list[item]  # type: ignore[valid-type]
    return create_model(name, items=(items, ...), total=(int, ...), limit=(int, ...), offset=(int, ...))


JobPage = _page_of(JobOut, "JobPage")
DeadLetterPage = _page_of(DeadLetterOut, "DeadLetterPage")


class JobBatchOut(BaseModel):
    jobs: list[JobOut]  # type: ignore[valid-type]


class Health(BaseModel):
    status: Literal["ok"]


class Error(BaseModel):
    """Every error but 422."""

    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationFailure(BaseModel):
    """422: what is wrong with the request, one entry per problem."""

    detail: list[ValidationIssue]
