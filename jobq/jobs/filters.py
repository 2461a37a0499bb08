"""One filter over jobs, for listings (:func:`jobq.list_jobs`, ``GET /jobs``), dry runs
and bulk operations (:mod:`jobq.jobs.operations`): a validated model, and the WHERE clause
it stands for (made of the fragments ``jobq.store.sql.ledger.JOB_LIST_FILTERS``).

Every criterion given must hold (AND); none given matches every job. ``error`` is a
case-insensitive substring of the job's last error, taken literally (``%`` and ``_``
are not wildcards).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from psycopg import sql
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic import field_validator

from jobq.store.sql.ledger import JOB_LIST_FILTERS
from jobq.errors import InvalidArgument
from jobq.job import STATUSES
from jobq.spec import MAX_QUEUE_LENGTH, MAX_TAG_LENGTH, MAX_TYPE_LENGTH, as_utc, check_text, field_name

MAX_IDS = 1000
MAX_ERROR_LENGTH = 1000
MAX_SCHEDULE_NAME_LENGTH = 100  # jobq.schedules.declarations' names: [A-Za-z0-9_.:-]{1,100}
MAX_ID = 2**63 - 1


def _text(max_length: int, min_length: int = 0) -> Any:
    return Annotated[StrictStr, Field(min_length=min_length, max_length=max_length), AfterValidator(check_text)]


JobId = Annotated[StrictInt, Field(ge=1, le=MAX_ID)]
Moment = Annotated[datetime, AfterValidator(as_utc)]


class JobFilter(BaseModel):
    """Which jobs: each field given narrows the set. Unknown fields are refused (a typo
    must not widen a bulk action to every job)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal[STATUSES] | None = None  # type: ignore[valid-type]
    queue: _text(MAX_QUEUE_LENGTH) | None = None  # type: ignore[valid-type]
    type: _text(MAX_TYPE_LENGTH) | None = None  # type: ignore[valid-type]
    tag: _text(MAX_TAG_LENGTH) | None = Field(None, description="Jobs carrying this tag.")  # type: ignore[valid-type]
    ids: list[JobId] | None = Field(None, min_length=1, max_length=MAX_IDS, description=f"At most {MAX_IDS} ids.")
    created_after: Moment | None = Field(None, description="Strictly after; without an offset, UTC.")
    created_before: Moment | None = Field(None, description="Strictly before; without an offset, UTC.")
    error: _text(MAX_ERROR_LENGTH, 1) | None = Field(  # type: ignore[valid-type]
        None, description="A substring of the last error, any case."
    )
    schedule: _text(MAX_SCHEDULE_NAME_LENGTH) | None = Field(  # type: ignore[valid-type]
        None, description="Jobs a periodic schedule of this name enqueued."
    )

    @field_validator("created_after", "created_before", mode="before")
    @classmethod
    def _a_time(cls, value: object) -> object:
        # Refuse numbers: pydantic would read them as Unix timestamps, which nobody means.
        if value is not None and not isinstance(value, (str, datetime)):
            raise ValueError("must be an ISO-8601 date-time")
        return value

    def given(self) -> dict[str, Any]:
        """The criteria given, by name."""
        return {name: value for name, value in self if value is not None}

    def conditions(self) -> sql.Composable:
        """The criteria as SQL joined with AND (``TRUE`` for none), for :meth:`params`."""
        clauses = [sql.SQL(JOB_LIST_FILTERS[name]) for name in self.given()]
        return sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("TRUE")

    def params(self) -> dict[str, Any]:
        """The placeholders' values of :meth:`conditions`."""
        values = self.given()
        if "error" in values:
            values["error"] = "%" + _escape_like(values["error"]) + "%"
        return values

    def to_json(self) -> dict[str, Any]:
        """The criteria given, JSON-ready (an operation's target, an audit row)."""
        return self.model_dump(mode="json", exclude_none=True)


def parse_filter(values: Mapping[str, Any] | JobFilter, *, prefix: str = "") -> JobFilter:
    """Validate a filter's fields; raise :class:`InvalidArgument` naming the first bad one
    (``ids[3]``, with ``prefix`` before it)."""
    if isinstance(values, JobFilter):
        return values
    try:
        return JobFilter.model_validate(dict(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidArgument(prefix + (field_name(first["loc"]) or "filter"), first["msg"]) from None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
