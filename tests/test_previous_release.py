"""A process of the previous release (before schema 5's seventh status) reading a
database where jobs were cancelled: its ``counts()``, ``list_jobs()`` and ``get()``,
run from that release's own source (commit db87d63, kept in tests/previous_release),
must not break and must still count its six statuses right."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import jobq
from jobq.store import connections
from support.claims import claim

pytestmark = [pytest.mark.db, pytest.mark.control]

PREVIOUS_RELEASE = "db87d63"  # the last commit before a9ceadf (schema 5)
SNAPSHOT = Path(__file__).resolve().parent / "previous_release"
SIX = ("pending", "claimed", "running", "done", "failed", "dead")


def source(path: str) -> str:
    """``jobq/<name>.py`` as the previous release had it."""
    return (SNAPSHOT / (Path(path).name + ".txt")).read_text()


def module(name: str, text: str) -> types.ModuleType:
    loaded = types.ModuleType(name)
    sys.modules[name] = loaded  # dataclasses look their module up while the class is made
    exec(compile(text, f"{PREVIOUS_RELEASE}:{name}", "exec"), loaded.__dict__)
    return loaded


@pytest.fixture
def previous_ledger(monkeypatch):
    """jobq/jobs/ledger.py of the previous release, over its own job.py and queries.py (the
    rest, unchanged since, is today's)."""
    for name in ("previous.job", "previous.queries", "previous.ledger"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    job, queries = module("previous.job", source("jobq/job.py")), module("previous.queries", source("jobq/queries.py"))
    assert job.STATUSES == SIX
    monkeypatch.setitem(sys.modules, "jobq.job", job)
    # It imports the modules by their names then: jobq.queries and jobq.db (today
    # jobq.store.sql and jobq.store.connections), given to it here under those names.
    monkeypatch.setattr(jobq, "queries", queries, raising=False)
    monkeypatch.setitem(sys.modules, "jobq.db", connections)
    ledger = module("previous.ledger", source("jobq/jobs/ledger.py"))
    monkeypatch.undo()
    yield ledger
    for name in ("previous.job", "previous.queries", "previous.ledger"):
        sys.modules.pop(name, None)


def test_the_previous_counts_and_reads_survive_cancelled_rows_and_counters(conn, previous_ledger):
    jobs = jobq.enqueue_many([{"type": "noop", "queue": q} for q in ("a", "a", "a", "b", "b")], conn=conn)
    claim(conn, 1, ["a"])
    for job in jobs[1:3] + jobs[4:]:
        jobq.cancel(job.id, conn=conn)
    truth = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    assert truth == {"claimed": 1, "pending": 1, "cancelled": 3}

    old = previous_ledger.counts(conn=conn)
    assert {s: old.depth[s] for s in SIX} == {s: truth.get(s, 0) for s in SIX}
    assert sum(old.depth[s] for s in SIX) == 2
    assert old.totals["enqueued_total"] == 5
    # A name it does not know lands among its totals: `jobq inspect --json` shows it there,
    # no figure of its metrics adds it in.
    assert old.totals["cancelled"] == 3
    assert {q: old.queues[q]["pending"] + old.queues[q]["claimed"] for q in ("a", "b")} == {"a": 1, "b": 1}

    page = previous_ledger.list_jobs(conn=conn)
    assert (page.total, len(page.items)) == (2, 2)  # the six statuses the old release knows
    assert [j.status for j in previous_ledger.list_jobs(queue="a", status="claimed", conn=conn).items] == ["claimed"]
    assert previous_ledger.get(jobs[1].id, conn=conn).status == "cancelled"


def test_the_previous_counts_and_reads_survive_waiting_steps(conn, previous_ledger):
    """Schema 15's eighth status, `waiting` (a workflow's step whose parents have not all
    finished), as the previous release reads it: like `cancelled`, a name it does not
    know lands among its totals, and its listing of its six statuses leaves it out.
    (Releasing a step needs nothing of a worker: the database does it, in the trigger
    that the previous release's outcome statements fire like today's.)"""
    wf = jobq.Workflow()
    root = wf.add("noop")
    step = wf.add("noop", after=[root])
    run = wf.enqueue(conn=conn)
    old = previous_ledger.counts(conn=conn)
    assert {s: old.depth[s] for s in SIX} == {**dict.fromkeys(SIX, 0), "pending": 1}
    assert old.totals["waiting"] == 1
    page = previous_ledger.list_jobs(conn=conn)
    assert (page.total, len(page.items)) == (1, 1)  # its total counts the six statuses it knows
    assert previous_ledger.get(run.jobs[step].id, conn=conn).status == "waiting"
