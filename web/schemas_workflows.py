"""The request and response models of ``/workflows`` and of ``GET /jobs/{id}?wait=N``
(kept apart from web/schemas.py). A workflow's steps are checked whole by
:func:`jobq.workflows.definition.from_steps` (cycles, names, options), which names the
step at fault; the models here check the envelope."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from jobq.jobs.ledger import MAX_ID
from jobq.workflows.definition import MAX_STEPS
from jobq.workflows.runs import MAX_LIST_LIMIT, WORKFLOW_STATUSES
from web.schemas import LOCATIONS, Parameters

MAX_WAIT = 25  # seconds: under a router's 30 s limit

# ---------------------------------------------------------------------------------------
# Requests


class StepBody(BaseModel):
    """One step: its name (default: its type, made unique), its job (type, payload and any
    option of POST /jobs but idempotency_key and unique_while), its parents and what a
    parent's failure does to it."""

    model_config = ConfigDict(extra="allow")

    name: StrictStr | None = Field(None, description="Unique in the workflow; `after` refers to it.")
    type: StrictStr
    payload: dict[str, Any] | None = None
    after: list[StrictStr] = Field(default_factory=list, description="Names of the steps that must finish first.")
    on_parent_failure: Literal["cancel", "run"] = Field(
        "cancel", description="A parent ended dead, cancelled or deleted: `cancel` this step (and its "
        "descendants), or `run` it anyway (the failure in job.parent_failures).",
    )


class WorkflowBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: StrictStr | None = Field(None, min_length=1, max_length=200)
    idempotency_key: StrictStr | None = Field(
        None, min_length=1, max_length=255, description="A workflow holding this key is returned (200) instead."
    )
    steps: list[StepBody] = Field(min_length=1, description=f"At most {MAX_STEPS:,} steps.")


class WorkflowPath(Parameters):
    workflow_id: int = Field(ge=1, le=MAX_ID)


class WorkflowListQuery(Parameters):
    model_config = ConfigDict(extra="ignore")

    status: Literal[WORKFLOW_STATUSES] | None = None  # type: ignore[valid-type]
    before: int | None = Field(None, ge=1, le=MAX_ID, description="Keyset cursor: the previous page's next_before.")
    limit: int = Field(50, ge=1, le=MAX_LIST_LIMIT)


class JobWaitQuery(Parameters):
    model_config = ConfigDict(extra="ignore")

    wait: float | None = Field(
        None, ge=0, le=MAX_WAIT,
        description=f"Answer once the job is done, dead or cancelled, or after this many seconds (at most {MAX_WAIT}).",
    )


LOCATIONS.update({WorkflowBody.__name__: "body", WorkflowPath.__name__: "path",
                  WorkflowListQuery.__name__: "query", JobWaitQuery.__name__: "query"})

# ---------------------------------------------------------------------------------------
# Responses


class WorkflowStepOut(BaseModel):
    name: str
    on_parent_failure: str
    parents_left: int
    spawned_by: str | None
    job_id: int | None
    status: str | None
    type: str | None


class WorkflowEdgeOut(BaseModel):
    parent: str
    child: str
    outcome: str | None = Field(description="The parent's end once settled: done, dead, cancelled or deleted.")


class WorkflowOut(BaseModel):
    id: int
    name: str | None
    status: str | None = Field(description="running, done, dead or cancelled")
    created_at: datetime | None
    jobs: dict[str, int] = Field(description="Step name -> its current job id.")
    steps: list[WorkflowStepOut]
    edges: list[WorkflowEdgeOut]


class WorkflowSummary(BaseModel):
    id: int
    name: str | None
    created_at: datetime
    steps: int
    done: int
    status: str


class WorkflowPage(BaseModel):
    workflows: list[WorkflowSummary]
    next_before: int | None = Field(description="Pass as ?before= for the next page; null on the last.")
