"""The request and response models of ``/stats`` (the per-minute rollup, :mod:`jobq.observe.rollup`),
kept apart from web/schemas.py. The query model validates what :func:`jobq.observe.rollup.series`
accepts; the response models only document."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, StrictStr

from jobq.observe.rollup import WINDOWS
from jobq.spec import MAX_QUEUE_LENGTH, check_text
from web.schemas import LOCATIONS, Parameters

Window = Literal[tuple(WINDOWS)]  # type: ignore[valid-type]


class StatsQuery(Parameters):
    window: Window = Field("15m", description="How far back: one point per minute.")  # type: ignore[valid-type]
    queue: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUEUE_LENGTH), AfterValidator(check_text)] | None = (
        Field(None, description="One queue; without it, all queues together.")
    )


# Bad query parameters answer 400 naming them (web.errors.validation_response).
LOCATIONS.update({StatsQuery.__name__: "query"})


class PointOut(BaseModel):
    minute: datetime = Field(description="The minute's start (UTC).")
    completed: int = Field(description="Jobs done in the minute.")
    failed: int = Field(description="Failed runs (retried or dead) in the minute.")
    dead: int
    cancelled: int
    pending: int = Field(description="Depth when the minute was rolled up (0 if it was rolled up late).")
    running: int
    run_p50: float | None = Field(description="Run time (started -> completed) of the jobs done, seconds.")
    run_p95: float | None
    run_p99: float | None
    latency_p50: float | None = Field(description="Start latency (run_at -> started) of the jobs done, seconds.")
    latency_p95: float | None
    latency_p99: float | None


class StatsOut(BaseModel):
    window: str
    queue: str | None
    points: list[PointOut] = Field(description="One per minute of the window, oldest first; zeros for a minute without data.")
