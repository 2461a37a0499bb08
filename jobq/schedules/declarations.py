"""Periodic jobs as code declares them: ``@jobq.periodic(...)`` above ``@jobq.register``,
or a plain call naming the ``type``::

    @jobq.periodic("0 3 * * *", name="nightly_report", tz="Europe/Berlin", overlap="skip")
    @jobq.register("nightly_report", timeout=600)
    def nightly_report(job): ...

    jobq.periodic("0 * * * *", name="hourly_cleanup", type="cleanup", payload={"days": 7})

Everything is checked when the module is imported, and a bad expression, zone, name or
job field raises :class:`jobq.errors.InvalidArgument` naming the schedule. What a
worker's modules declared is :func:`declared`; the worker stores it at boot
(:mod:`jobq.schedules.stored`), and the maintenance leader fires it (:mod:`jobq.daemon.maintenance.firing`).
The code says what a schedule is; the operator whether it runs (pause, resume).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar
from zoneinfo import ZoneInfoNotFoundError

from jobq.schedules.cron import Cron, CronError
from jobq.errors import InvalidArgument
from jobq.spec import DEFAULT_MAX_RETRIES, DEFAULT_PRIORITY, DEFAULT_QUEUE, parse_spec

NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
CATCH_UP = ("latest", "all", "skip")
OVERLAP = ("allow", "skip")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Periodic:
    """One schedule as declared: when, in which zone, what job, and the two policies.
    Its fields are what the code decides; a stored schedule
    (:class:`jobq.schedules.stored.Schedule`) has them all, and what the database adds."""

    name: str
    cron: str
    tz: str
    type: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_retries: int
    catch_up: str
    overlap: str

    @property
    def slots(self) -> Cron:
        return Cron(self.cron, self.tz)

    def definition_hash(self) -> str:
        """Of everything the code decides (16 hex digits): two workers with the same
        hash declare the same schedule."""
        decided = [getattr(self, field.name) for field in fields(Periodic) if field.name != "name"]
        text = json.dumps(decided, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


_declared: dict[str, Periodic] = {}


def periodic(
    cron: str,
    *,
    name: str | None = None,
    type: str | None = None,
    tz: str = "UTC",
    catch_up: str = "latest",
    overlap: str = "allow",
    payload: dict[str, Any] | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> Any:
    """Declare a schedule. With ``type``, a plain call: declared now, returns the
    :class:`Periodic`. Without, a decorator for a function that ``@jobq.register``
    registered (put ``periodic`` above it): ``type`` is the registered name, and so is
    ``name`` unless given. Declaring a name again replaces it (a module re-imported).

    Raises :class:`InvalidArgument` naming the schedule.
    """
    options = dict(cron=cron, tz=tz, catch_up=catch_up, overlap=overlap, payload=payload, queue=queue,
                   priority=priority, max_retries=max_retries)
    if type is not None:
        return declare(_build(name or type, type, **options))

    def decorate(func: F) -> F:
        registered = getattr(func, "__jobq_type__", None)
        if registered is None:
            shown = name or getattr(func, "__name__", repr(func))
            raise InvalidArgument(
                f"schedule {shown!r}", "jobq.periodic must be above @jobq.register (or pass type=...)"
            )
        declare(_build(name or registered, registered, **options))
        return func

    return decorate


def _build(name: str, job_type: str, *, cron: str, tz: str, catch_up: str, overlap: str, payload: Any,
           queue: str, priority: int, max_retries: int) -> Periodic:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidArgument(f"schedule {name!r}", "a name is 1-100 of A-Z a-z 0-9 _ . : -")
    where = f"schedule {name!r}"
    if not isinstance(cron, str):
        raise InvalidArgument(f"{where} cron", "must be a string")
    if not isinstance(tz, str) or not tz:
        raise InvalidArgument(f"{where} tz", "must be an IANA zone name, e.g. Europe/Berlin")
    try:
        Cron(cron, tz)
    except CronError as exc:
        raise InvalidArgument(f"{where} cron", str(exc)) from None
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"{where} tz", f"unknown time zone {tz!r}") from None
    if catch_up not in CATCH_UP:
        raise InvalidArgument(f"{where} catch_up", f"must be one of {', '.join(CATCH_UP)}")
    if overlap not in OVERLAP:
        raise InvalidArgument(f"{where} overlap", f"must be one of {', '.join(OVERLAP)}")
    spec = parse_spec(
        {"type": job_type, "payload": payload, "queue": queue, "priority": priority, "max_retries": max_retries},
        prefix=f"{where} ",
    )
    return Periodic(name, " ".join(cron.split()), tz, spec.type, spec.queue, dict(spec.payload), spec.priority,
                    spec.max_retries, catch_up, overlap)


def declare(schedule: Periodic) -> Periodic:
    _declared[schedule.name] = schedule
    return schedule


def declared() -> dict[str, Periodic]:
    """The schedules this process's modules declared, by name."""
    return dict(_declared)


def hashes() -> dict[str, str]:
    """Name -> definition hash of every declared schedule (what a worker's row records)."""
    return {name: schedule.definition_hash() for name, schedule in _declared.items()}
