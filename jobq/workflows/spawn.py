"""``jobq.spawn``: a step's handler adds jobs to its workflow. They are kept in the run's
view (:mod:`jobq.handlers.context`) and travel with the step's successful outcome (the
result's envelope, :data:`jobq.handlers.execution.SPAWN`), written by the outcome
statement's trigger under the step's lease (migration 0015): a run that fails, times
out or is lost with its worker spawns nothing, and a step's dependents wait for what it
spawned as well as for the step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobq.errors import InvalidArgument
from jobq.handlers import context
from jobq.spec import parse_spec
from jobq.workflows.definition import MAX_WORKFLOW_STEPS


def spawn(type: str, payload: Mapping[str, Any] | None = None, *, name: str | None = None, **options: Any) -> str:
    """Add a job to the running step's workflow, written with the step's success; returns
    its step name (``<this step>.<name>``, ``name`` defaulting to the type made unique
    among this run's spawns). ``options``: what :func:`jobq.enqueue` takes but
    idempotency_key, unique_while and concurrency_key (a spawned job is written from the
    step's result by migration 0015's trigger, which knows no key). Raises :class:`InvalidArgument` outside a
    workflow step's handler, or naming a bad argument."""
    run = context.current()
    if run is None or run.workflow_id is None:
        raise InvalidArgument("spawn", "only a workflow step's handler can spawn (jobq.Workflow)")
    for option in ("idempotency_key", "unique_while", "concurrency_key"):
        if option in options:
            raise InvalidArgument(option, "spawned steps take none")
    spec = parse_spec({"type": type, "payload": payload, **options})
    spawned = run.spawned if run.spawned is not None else []
    if len(spawned) >= MAX_WORKFLOW_STEPS:
        raise InvalidArgument("spawn", f"at most {MAX_WORKFLOW_STEPS} jobs per run")
    taken = {job["name"] for job in spawned}
    if name is None:
        name, n = spec.type, 2
        while name in taken:
            name, n = f"{spec.type}-{n}", n + 1
    elif not isinstance(name, str) or not 1 <= len(name) <= 100 or name in taken:
        raise InvalidArgument("name", "must be a string of 1-100 characters, unique among this run's spawns")
    spawned.append({
        "name": name, "type": spec.type, "queue": spec.queue, "payload": spec.payload, "priority": spec.priority,
        "max_retries": spec.max_retries, "run_at": spec.run_at.isoformat() if spec.run_at else None, "tags": spec.tags,
    })
    run.spawned = spawned
    return name
