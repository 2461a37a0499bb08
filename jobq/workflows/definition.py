"""A workflow as it is written before it is enqueued: steps (jobs with names) and the
edges between them, checked whole. Celery's shapes, ``chain`` and ``group``, are sugar
over the same :class:`Workflow`.

Nothing here touches the database: :mod:`jobq.workflows.submission` writes a checked
workflow in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from jobq.errors import InvalidArgument
from jobq.spec import JobSpec, parse_spec

MAX_STEPS = 10_000  # of a workflow sent over HTTP (POST /workflows: one request body)
MAX_WORKFLOW_STEPS = 100_000  # of one built in Python (one insert statement)
ON_PARENT_FAILURE = ("cancel", "run")
# Per-step keys would make a step's insert depend on another job's key; a workflow is
# made idempotent whole (Workflow.enqueue(idempotency_key=...)).
_REFUSED_OPTIONS = ("idempotency_key", "unique_while")


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step: its name in the workflow, its job, the names of its parents, and what a
    parent's failure (dead, cancelled, deleted) does to it: ``"cancel"`` it, or ``"run"``
    it anyway."""

    name: str
    spec: JobSpec
    after: tuple[str, ...] = ()
    on_parent_failure: str = "cancel"


@dataclasses.dataclass(frozen=True, slots=True)
class StepDraft:
    """A step not placed in a workflow yet (:func:`step`), for :func:`chain` and :func:`group`."""

    type: str
    payload: Mapping[str, Any] | None = None
    name: str | None = None
    on_parent_failure: str = "cancel"
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Workflow:
    """Jobs with edges: ``add`` steps, then ``enqueue`` them all in one transaction.

    ::

        wf = jobq.Workflow(name="order-17")
        fetch = wf.add("fetch", {"url": u})
        thumbs = [wf.add("thumb", {"size": s}, after=[fetch]) for s in (64, 256, 1024)]
        wf.add("publish", {}, after=thumbs, on_parent_failure="run")
        run = wf.enqueue()
    """

    def __init__(self, name: str | None = None) -> None:
        if name is not None and not (isinstance(name, str) and 1 <= len(name) <= 200):
            raise InvalidArgument("name", "must be a string of 1-200 characters")
        self.name = name
        self.steps: dict[str, Step] = {}

    def add(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        after: Iterable[str] = (),
        name: str | None = None,
        on_parent_failure: str = "cancel",
        **options: Any,
    ) -> str:
        """Add a step and return its name. ``after``: names of steps added before it,
        which must all finish first. ``name`` defaults to the type, made unique (``thumb``,
        ``thumb-2``, ...). ``options``: what :func:`jobq.enqueue` takes (queue, priority,
        max_retries, run_at, tags, concurrency_key: a step obeys limits like any job).
        Raises :class:`InvalidArgument` naming the step."""
        if name is None:
            name = _unique_name(type if isinstance(type, str) else "step", self.steps)
        label = f"steps[{name}]"
        if not isinstance(name, str) or not 1 <= len(name) <= 200:
            raise InvalidArgument("steps[].name", "must be a string of 1-200 characters")
        if name in self.steps:
            raise InvalidArgument(f"{label}.name", "is the name of another step")
        if len(self.steps) >= MAX_WORKFLOW_STEPS:
            raise InvalidArgument("steps", f"at most {MAX_WORKFLOW_STEPS} steps")
        for option in _REFUSED_OPTIONS:
            if option in options:
                raise InvalidArgument(f"{label}.{option}", "steps take none; give the workflow an idempotency_key")
        if on_parent_failure not in ON_PARENT_FAILURE:
            raise InvalidArgument(f"{label}.on_parent_failure", "must be 'cancel' or 'run'")
        parents = tuple(dict.fromkeys([after] if isinstance(after, str) else after))
        for parent in parents:
            if parent not in self.steps:
                # Parents come before their children: a workflow built this way has no cycle.
                raise InvalidArgument(f"{label}.after", f"no step named {parent!r} was added before it")
        spec = parse_spec({"type": type, "payload": payload, **options}, prefix=f"{label}.")
        self.steps[name] = Step(name, spec, parents, on_parent_failure)
        return name

    def enqueue(self, *, conn: Any = None, idempotency_key: str | None = None) -> Any:
        """Write every step in one transaction and return its :class:`~jobq.workflows.runs.WorkflowRun`
        (see :func:`jobq.workflows.submission.submit`)."""
        from jobq.workflows.submission import submit

        return submit(self, conn=conn, idempotency_key=idempotency_key)


def from_steps(name: str | None, steps: list[dict[str, Any]]) -> Workflow:
    """A workflow from plain step dicts (``POST /workflows``): each ``name``, ``type``,
    ``payload``, ``after``, ``on_parent_failure`` and job options, in any order of
    parents and children. Raises :class:`InvalidArgument` naming the step for a cycle,
    an unknown or duplicate name, an unknown option, or too many steps."""
    if len(steps) > MAX_STEPS:
        raise InvalidArgument("steps", f"at most {MAX_STEPS} steps")
    named: dict[str, dict[str, Any]] = {}
    for index, raw in enumerate(steps):
        step_name = raw.get("name") or raw.get("type")
        if not isinstance(step_name, str):
            raise InvalidArgument(f"steps[{index}].name", "must be a string")
        if step_name in named:
            raise InvalidArgument(f"steps[{step_name}].name", "is the name of another step")
        named[step_name] = raw
    workflow = Workflow(name)
    for step_name in _parents_first(named):
        raw = dict(named[step_name])
        raw.pop("name", None)
        workflow.add(
            raw.pop("type", None),
            raw.pop("payload", None),
            after=raw.pop("after", None) or (),
            name=step_name,
            on_parent_failure=raw.pop("on_parent_failure", None) or "cancel",
            **raw,
        )
    return workflow


def _parents_first(named: dict[str, dict[str, Any]]) -> list[str]:
    """The step names ordered parents before children; a cycle or an unknown parent is
    an :class:`InvalidArgument` naming the step."""
    order: list[str] = []
    state: dict[str, str] = {}
    for start in named:
        stack = [(start, iter(_after(named, start)))]
        if state.get(start):
            continue
        state[start] = "open"
        while stack:
            current, parents = stack[-1]
            parent = next(parents, None)
            if parent is None:
                stack.pop()
                state[current] = "closed"
                order.append(current)
                continue
            if parent not in named:
                raise InvalidArgument(f"steps[{current}].after", f"no step is named {parent!r}")
            if state.get(parent) == "open":
                raise InvalidArgument(f"steps[{current}].after", f"{parent!r} closes a cycle")
            if parent not in state:
                state[parent] = "open"
                stack.append((parent, iter(_after(named, parent))))
    return order


def _after(named: dict[str, dict[str, Any]], name: str) -> list[str]:
    after = named[name].get("after") or []
    if not isinstance(after, list) or not all(isinstance(p, str) for p in after):
        raise InvalidArgument(f"steps[{name}].after", "must be a list of step names")
    return after


def _unique_name(base: str, taken: Mapping[str, Any]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def step(
    type: str, payload: Mapping[str, Any] | None = None, *, name: str | None = None,
    on_parent_failure: str = "cancel", **options: Any,
) -> StepDraft:
    """A step for :func:`chain` or :func:`group`; arguments as :meth:`Workflow.add`."""
    return StepDraft(type, payload, name, on_parent_failure, options)


def _place(workflow: Workflow, draft: StepDraft, after: Iterable[str]) -> str:
    return workflow.add(draft.type, draft.payload, after=after, name=draft.name,
                        on_parent_failure=draft.on_parent_failure, **draft.options)


def chain(*steps: StepDraft, name: str | None = None) -> Workflow:
    """Each step after the one before it (Celery's chain)."""
    workflow = Workflow(name)
    previous: list[str] = []
    for draft in steps:
        previous = [_place(workflow, draft, previous)]
    return workflow


def group(*steps: StepDraft, then: StepDraft | None = None, name: str | None = None) -> Workflow:
    """Steps that run side by side; with ``then``, a step after all of them (Celery's
    group, and with a callback its chord)."""
    workflow = Workflow(name)
    members = [_place(workflow, draft, ()) for draft in steps]
    if then is not None:
        _place(workflow, then, members)
    return workflow
