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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, create_model
from pydantic import model_validator

from jobq.jobs.audit import DEFAULT_LIMIT as AUDIT_DEFAULT_LIMIT
from jobq.errors import InvalidArgument
from jobq.jobs.filters import MAX_IDS, JobFilter
from jobq.job import DeadLetter, Job
from jobq.jobs.cursors import MAX_CURSOR_LENGTH
from jobq.jobs.ledger import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT
from jobq.observe.metrics import Metrics
from jobq.jobs.operations import GROUP_ID_PATTERN, JOB_ACTIONS, check_job_action
from jobq.spec import MAX_IDEMPOTENCY_KEY_LENGTH, MAX_PRIORITY, MAX_TYPE_LENGTH, MIN_PRIORITY, JobSpec, check_text

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


class JobListQuery(PageQuery, JobFilter):
    """A page of the jobs matching a filter (jobq.jobs.filters.JobFilter); ``ids`` repeats:
    ``?ids=3&ids=7``. Unknown parameters are ignored, as the seed's app ignored them."""

    model_config = ConfigDict(extra="ignore", frozen=False)

    # Query strings are text: ids parse as integers here (the filter itself is strict).
    ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None = Field(
        None, min_length=1, max_length=MAX_IDS, description=f"At most {MAX_IDS} ids: ?ids=3&ids=7."
    )
    cursor: Annotated[StrictStr, Field(min_length=1, max_length=MAX_CURSOR_LENGTH)] | None = Field(
        None, description="The next page: a page's next_cursor, as it came (offset must then be 0)."
    )
    before: int | None = Field(
        None, ge=1, le=MAX_ID, description="Start after (older than) this job, newest first (offset must then be 0)."
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


JobPage = create_model(
    "JobPage",
    __base__=_page_of(JobOut, "JobPageBase"),
    total_exact=(Literal[False] | None, Field(None, description=(
        "false when total is a lower bound: with tag, ids, created_before or error, it is counted "
        "10,000 rows past the offset at most"))),
    next_cursor=(str | None, Field(None, description=(
        "Pass as cursor= for the next page (read by keyset, as cheap deep down as on top); null on the last page."))),
)
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

# ---------------------------------------------------------------------------------------
# Operating the queue: bulk operations, dead-letter group actions, the audit trail


class BulkRequest(BaseModel):
    """One action on every job matching a filter. ``priority`` is set_priority's alone;
    the filter names at least one criterion (an empty one would match every job)."""

    model_config = ConfigDict(extra="forbid")

    filter: JobFilter
    action: Literal[JOB_ACTIONS] = Field(  # type: ignore[valid-type]
        description="cancel: pending, claimed or running jobs; retry: dead (their letters replayed) or cancelled "
        "(copied) jobs, once; delete: pending or finished jobs, never claimed or running ones; run_now: pending "
        "jobs scheduled later; set_priority: pending jobs."
    )
    priority: Annotated[StrictInt, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)] | None = Field(None, description="For set_priority: 1-10.")
    dry_run: StrictBool = Field(False, description="Count the matching jobs and change nothing.")

    @model_validator(mode="after")
    def _consistent(self) -> BulkRequest:
        try:
            check_job_action(self.action, self.filter, self.priority)
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None
        return self


class OperationPath(Parameters):
    operation_id: int = Field(ge=1, le=MAX_ID)


class DeadLetterGroupPath(Parameters):
    group_id: str = Field(pattern=GROUP_ID_PATTERN, description="A group's id, as GET /dead-letter/groups gives it.")


class AuditQuery(Parameters):
    limit: int = Field(AUDIT_DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    before: int | None = Field(None, ge=1, le=MAX_ID, description="The next page: the rows older than this id.")


LOCATIONS.update({
    BulkRequest.__name__: "body",
    OperationPath.__name__: "path",
    DeadLetterGroupPath.__name__: "path",
    AuditQuery.__name__: "query",
})


class DryRunOut(BaseModel):
    matched: int
    dry_run: Literal[True]


class OperationOut(BaseModel):
    """A bulk operation; matched, changed and skipped count the chunks done so far
    (skipped: matched but not eligible for the action, or held by another session)."""

    id: int
    action: str
    target: dict[str, Any] = Field(description='{"filter": {...}} or {"dead_letter_group": "..."}')
    params: dict[str, Any] = Field(description="last_id: the newest row it acts on; priority for set_priority.")
    actor: str
    state: Literal["running", "done", "failed"]
    matched: int
    changed: int
    skipped: int
    error: str | None
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None


class AuditEntryOut(BaseModel):
    id: int
    at: datetime
    actor: str = Field(description="cli:<user>@<host>, api:<HMAC of the token>, or lib:<user>@<host>:<pid>.")
    action: str
    target: dict[str, Any]
    counts: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditEntryOut]
    next_before: int | None = Field(description="Pass as before= for the next page; null on the last.")
