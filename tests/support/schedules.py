"""Periodic schedules for the daemon tests, loaded by workers through JOBQ_HANDLERS
(``support.handlers,support.schedules``).

Which schedules a worker's code declares is read from JOBQ_TEST_SCHEDULES:
``name|cron|type|catch_up|overlap|payload JSON|tz`` entries separated by ``;``, so that a
test can give each daemon it starts the code it means (and a "deploy" new code).
:func:`parse` builds the same declarations in the test process.
"""

from __future__ import annotations

import json
import os

import jobq
from jobq.schedules.declarations import Periodic

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


parse(os.environ.get(VARIABLE, ""))
