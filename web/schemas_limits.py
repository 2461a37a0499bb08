"""The request and response models of flow control: ``PATCH /queues/{name}`` and
``/limits``. Request models take the shapes; :mod:`jobq.limits` checks the values (a
bad one is a 400 naming the field, as from Python). Response models only document."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from jobq.spec import MAX_CONCURRENCY_KEY_LENGTH, check_text
from web.schemas import LOCATIONS, Parameters

RATE = "`N/s`, `N/m` or `N/h`: at most N starts (claims) in any window of one period, across every host."
CONCURRENCY = "At most this many jobs claimed or running at once, across every host; null removes the limit."


class LimitPath(Parameters):
    pattern: Annotated[
        StrictStr, Field(min_length=1, max_length=MAX_CONCURRENCY_KEY_LENGTH), AfterValidator(check_text)
    ]


class QueueLimitsBody(BaseModel):
    """The limits to change; a field left out keeps its value, null removes it."""

    model_config = ConfigDict(extra="forbid")

    concurrency: StrictInt | None = Field(None, description=CONCURRENCY)
    rate: StrictStr | None = Field(None, description=RATE)
    fair: StrictBool | None = Field(None, description="Claims take turns between concurrency keys (jobs without a key count as one) instead of "
        "strict priority-then-age, so one key's backlog cannot starve another's jobs.")


class LimitBody(BaseModel):
    """A rule on keys, replaced whole: a concurrency, a rate, or both."""

    model_config = ConfigDict(extra="forbid")

    concurrency: StrictInt | None = Field(None, description=CONCURRENCY + " Per key the pattern governs.")
    rate: StrictStr | None = Field(None, description=RATE + " Per key the pattern governs.")


LOCATIONS.update({LimitPath.__name__: "path", QueueLimitsBody.__name__: "body", LimitBody.__name__: "body"})


class QueueLimitsOut(BaseModel):
    queue: str
    concurrency: int | None
    rate: str | None
    fair: bool
    in_use: int = Field(description="Slots taken now: its jobs claimed or running under the limit.")
    held: int = Field(description="Due pending jobs waiting while every slot is taken.")


class KeyRuleOut(BaseModel):
    pattern: str = Field(description="One key, or every key under a prefix (`tenant:*`), each with its own limit.")
    concurrency: int | None
    rate: str | None
    updated_at: datetime | None
    updated_by: str | None
    in_use: int = Field(description="Slots taken now by the keys the rule governs.")
    keys: int = Field(description="Keys holding those slots.")
    held: int = Field(description="Due pending jobs of keys whose slots are all taken.")


class LimitList(BaseModel):
    rules: list[KeyRuleOut]
    queues: list[QueueLimitsOut]


class LimitCleared(BaseModel):
    pattern: str
    cleared: bool = Field(description="Whether a rule was there.")
