"""The request and response models of ``/schedules`` (web/schedules.py), in the manner of
web/schemas.py: requests validate, responses are derived from the library's rows."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, get_type_hints

from pydantic import AfterValidator, BaseModel, Field, StrictStr, create_model

from jobq.schedules.declarations import NAME
from jobq.schedules.stored import Schedule
from jobq.spec import check_text
from web.schemas import LOCATIONS, JobOut, Parameters

MAX_REASON_LENGTH = 500


class SchedulePath(Parameters):
    name: str = Field(pattern=f"^{NAME.pattern}$", description="The schedule's name.")


class PauseQuery(Parameters):
    reason: Annotated[StrictStr, Field(max_length=MAX_REASON_LENGTH), AfterValidator(check_text)] | None = Field(
        None, description="Why it is paused, shown to whoever looks next."
    )


# Errors in path and query parameters answer 400 (web.errors reads where each model is from).
LOCATIONS.update({SchedulePath.__name__: "path", PauseQuery.__name__: "query"})


def _schedule_fields() -> dict[str, Any]:
    hints = get_type_hints(Schedule)
    fields: dict[str, Any] = {field.name: (hints[field.name], ...) for field in dataclasses.fields(Schedule)}
    return {**fields, "paused": (bool, ...), "orphaned": (bool, ...)}


ScheduleOut = create_model("Schedule", **_schedule_fields())
ScheduleDetailOut = create_model(
    "ScheduleDetail", **_schedule_fields(), jobs=(list[JobOut], Field(description="Its latest jobs, newest first.")),  # type: ignore[valid-type]
)


class ScheduleList(BaseModel):
    items: list[ScheduleOut]  # type: ignore[valid-type]
