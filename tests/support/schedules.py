"""Periodic schedules for the daemon tests, loaded by workers through JOBQ_HANDLERS
(``support.handlers,support.schedules``); and declaring schedules in the test process
as a worker's boot does (:func:`spec`, :func:`declare`).

Which schedules a worker's code declares is read from JOBQ_TEST_SCHEDULES:
``name|cron|type|catch_up|overlap|payload JSON|tz`` entries separated by ``;``, so that a
test can give each daemon it starts the code it means (and a "deploy" new code).
:func:`parse` builds the same declarations in the test process.
"""

from __future__ import annotations

import json
import os

import psycopg

import jobq
from jobq.daemon import presence
from jobq.schedules import stored
from jobq.schedules.declarations import Periodic, _build
from jobq.settings import DEFAULT_STALE_THRESHOLD

VARIABLE = "JOBQ_TEST_SCHEDULES"


def entry(name: str, cron: str, type: str = "noop", catch_up: str = "latest", overlap: str = "allow",
          payload: dict | None = None, tz: str = "UTC") -> str:
    return "|".join([name, cron, type, catch_up, overlap, json.dumps(payload or {}), tz])


def parse(text: str) -> list[Periodic]:
    declared = []
    for item in filter(None, text.split(";")):
        name, cron, job_type, catch_up, overlap, payload, tz = item.split("|")
        declared.append(jobq.periodic(cron, name=name, type=job_type, catch_up=catch_up, overlap=overlap,
                                      payload=json.loads(payload), tz=tz))
    return declared



def spec(name: str = "tick", cron: str = "0 * * * *", **options) -> Periodic:
    return _build(name, options.pop("type", "noop"), cron=cron, tz=options.pop("tz", "UTC"),
                  catch_up=options.pop("catch_up", "latest"), overlap=options.pop("overlap", "allow"),
                  payload=options.pop("payload", {"n": 1}), queue="default", priority=5, max_retries=3)


def declare(conn: psycopg.Connection, *specs: Periodic, worker: str = "w1") -> list[str]:
    """What a worker's boot does: its row, its declarations, the upsert."""
    presence.register(conn, worker, "host", 1, ["default"])
    presence.declare(conn, worker, {s.name: s.definition_hash() for s in specs})
    return stored.declare(conn, worker, {s.name: s for s in specs}, stale_seconds=DEFAULT_STALE_THRESHOLD)


parse(os.environ.get(VARIABLE, ""))
