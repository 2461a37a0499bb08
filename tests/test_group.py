"""GroupSubmitter: concurrent enqueues share one insert, each caller gets its own outcome,
and nobody waits without limit.

The insert is a function of the test's (no database): what is grouped, who gets which
result or error, and who waits how long, is the behaviour under test. What happens
against a real PostgreSQL (a stuck insert, a connection lost in flight) is in
tests/test_api_faults.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobq.errors import DatabaseUnavailable
from jobq.jobs.group_commit import GroupSubmitter
from jobq.spec import JobSpec

pytestmark = pytest.mark.unit


class SlowInsert:
    """Records each group; the first insert waits until released, so that others pile up."""

    def __init__(self, fail_type: str | None = None, error: Exception | None = None) -> None:
        self.groups: list[list[str]] = []
        self.release = threading.Event()
        self.fail_type = fail_type
        self.error = error

    def __call__(self, specs: list[JobSpec], ids: list[int] | None, traceparents: list[str | None]) -> list[str]:
        assert ids is None  # the ids of a lost attempt: none here
        self.groups.append([spec.type for spec in specs])
        if len(self.groups) == 1:
            assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        if any(spec.type == self.fail_type for spec in specs):
            raise ValueError(f"refused {self.fail_type}")
        return [f"job:{spec.type}" for spec in specs]  # stands for the Job


def run_concurrently(insert: SlowInsert, types: list[str]) -> list[object]:
    """Submit ``types[0]`` first; the others while its insert is held; return each outcome."""
    submitter = GroupSubmitter(insert)  # type: ignore[arg-type]

    def submit(name: str) -> object:
        try:
            return submitter.submit(JobSpec(type=name))
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(types)) as pool:
        first = pool.submit(submit, types[0])
        wait_until(lambda: insert.groups)
        rest = [pool.submit(submit, name) for name in types[1:]]
        wait_until(lambda: len(submitter._waiting) == len(types) - 1)  # all queued behind the held insert
        insert.release.set()
        return [first.result(10)] + [future.result(10) for future in rest]


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_a_lone_caller_inserts_at_once():
    insert = SlowInsert()
    insert.release.set()
    assert GroupSubmitter(insert).submit(JobSpec(type="a")) == "job:a"  # type: ignore[arg-type]
    assert insert.groups == [["a"]]


def test_callers_arriving_during_an_insert_go_in_together_next_each_with_its_job():
    insert = SlowInsert()
    outcomes = run_concurrently(insert, ["a", "b", "c", "d"])
    assert outcomes == ["job:a", "job:b", "job:c", "job:d"]
    assert insert.groups[0] == ["a"] and sorted(insert.groups[1]) == ["b", "c", "d"] and len(insert.groups) == 2


def test_a_job_the_database_refuses_fails_alone():
    insert = SlowInsert(fail_type="bad")
    outcomes = run_concurrently(insert, ["a", "b", "bad", "c"])
    assert outcomes[:2] == ["job:a", "job:b"] and outcomes[3] == "job:c"
    assert isinstance(outcomes[2], ValueError)


def test_an_unavailable_database_fails_every_caller_of_the_group():
    error = DatabaseUnavailable("down")
    outcomes = run_concurrently(SlowInsert(error=error), ["a", "b", "c"])
    assert outcomes == [error, error, error]


def test_callers_after_a_failed_group_are_served():
    insert = SlowInsert(error=DatabaseUnavailable("down"))
    submitter = GroupSubmitter(insert)  # type: ignore[arg-type]
    insert.release.set()
    with pytest.raises(DatabaseUnavailable):
        submitter.submit(JobSpec(type="a"))
    insert.error = None
    assert submitter.submit(JobSpec(type="b")) == "job:b"


def test_a_caller_queued_behind_a_stuck_insert_leaves_after_the_wait_timeout_and_its_job_is_never_sent():
    insert = SlowInsert()
    submitter = GroupSubmitter(insert, wait_timeout=0.2)  # type: ignore[arg-type]
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(submitter.submit, JobSpec(type="stuck"))
        wait_until(lambda: insert.groups)
        queued = [pool.submit(submitter.submit, JobSpec(type=name)) for name in ("b", "c")]
        for future in queued:
            with pytest.raises(DatabaseUnavailable, match="has not ended within 0.2 s"):
                future.result(10)
        assert submitter._waiting == []
        insert.release.set()
        assert first.result(10) == "job:stuck"
    assert insert.groups == [["stuck"]]
    assert submitter.submit(JobSpec(type="d")) == "job:d"  # the next caller inserts at once


class HeldInserts:
    """Insert number k (from 0) signals ``entered[k]`` and waits for ``release[k]``."""

    def __init__(self, held: int) -> None:
        self.groups: list[list[str]] = []
        self.entered = [threading.Event() for _ in range(held)]
        self.release = [threading.Event() for _ in range(held)]

    def __call__(self, specs: list[JobSpec], ids: list[int] | None, traceparents: list[str | None]) -> list[str]:
        k = len(self.groups)
        self.groups.append([spec.type for spec in specs])
        if k < len(self.release):
            self.entered[k].set()
            assert self.release[k].wait(10)
        return [f"job:{spec.type}" for spec in specs]


def test_a_caller_whose_job_is_in_an_insert_waits_for_that_insert_past_the_wait_timeout():
    insert = HeldInserts(2)
    submitter = GroupSubmitter(insert, wait_timeout=0.2)  # type: ignore[arg-type]
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(submitter.submit, JobSpec(type="a"))
        assert insert.entered[0].wait(10)
        rest = [pool.submit(submitter.submit, JobSpec(type=name)) for name in ("b", "c")]
        wait_until(lambda: len(submitter._waiting) == 2)
        insert.release[0].set()
        assert insert.entered[1].wait(10)  # b and c are in the second insert, held
        time.sleep(0.5)  # past their wait timeout
        assert not any(future.done() for future in rest)
        insert.release[1].set()
        assert [first.result(10)] + [future.result(10) for future in rest] == ["job:a", "job:b", "job:c"]
    assert insert.groups == [["a"], ["b", "c"]]
