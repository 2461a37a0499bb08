"""A worker's jobs in flight: the state its two threads share, and the sizing rule (no
database)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from jobq.daemon.worker.flight import DEFER_RUNNING, InFlight, Outcome
from jobq.daemon.worker.loop import next_size
from jobq.handlers.execution import RunResult
from jobq.jobs.leases import Claim
from jobq.job import Job

pytestmark = [pytest.mark.unit, pytest.mark.daemon]

MINUTE = lambda claim: 60.0  # noqa: E731  (a job's timeout)
OK = RunResult('{"ok": true}', None, 0.001)


def claim(job_id: int, locked: bool = True, queue: str = "default") -> Claim:
    now = datetime.now(timezone.utc)
    job = Job(
        id=job_id, type="noop", queue=queue, payload={}, status="claimed", priority=5, attempt=0,
        max_retries=3, run_at=now, claimed_at=now, started_at=None, heartbeat_at=now, completed_at=None,
        created_at=now, result=None, error=None, errors=[], worker_id="w", lease=job_id * 10,
    )
    return Claim(job, job_id * 10, locked)


def run_next(in_flight: InFlight, result: RunResult = OK) -> int:
    """Start the next job in line, finish it with ``result`` and buffer its outcome."""
    flight = in_flight.start_next(MINUTE)
    assert flight is not None
    in_flight.finished()
    in_flight.buffer(Outcome(flight.claim, result))
    return flight.job_id


def test_jobs_run_in_the_order_lined_up_and_the_running_one_is_known():
    in_flight = InFlight()
    jobs = [claim(1), claim(2)]
    in_flight.hold(jobs)
    assert in_flight.start_next(MINUTE).claim == jobs[0]
    assert in_flight.snapshot().running == 1
    in_flight.finished()
    assert in_flight.snapshot().running is None
    assert in_flight.start_next(MINUTE).claim == jobs[1]
    assert in_flight.start_next(MINUTE) is None


def test_a_job_past_defer_running_is_overdue_once_with_the_jobs_waiting_behind_it():
    in_flight = InFlight()
    jobs = [claim(1), claim(2), claim(3)]
    in_flight.hold(jobs)
    in_flight.start_next(MINUTE)
    assert in_flight.overdue() is None  # just started
    time.sleep(DEFER_RUNNING * 1.5)
    overdue = in_flight.overdue()
    assert overdue is not None
    assert overdue.claim == jobs[0] and overdue.elapsed >= DEFER_RUNNING
    assert overdue.waiting == jobs[1:]
    assert in_flight.overdue() is None  # marked once
    in_flight.finished()
    assert in_flight.start_next(MINUTE) is None  # the waiting jobs left the line
    assert [c.job_id for c in in_flight.held()] == [1]  # and were let go, to be given back


def test_written_outcomes_are_let_go_and_count_the_accepted_ones():
    in_flight = InFlight()
    in_flight.hold([claim(1), claim(2), claim(3)])
    run_next(in_flight)
    run_next(in_flight)
    taken = in_flight.take_outcomes()
    assert [f.job_id for f in taken.flights] == [1, 2]
    in_flight.written(taken, {2})  # 2's write was rejected by its lease
    assert in_flight.take_outcomes() is None  # already let go
    now = in_flight.snapshot()
    assert ([c.job_id for c in now.held], now.recorded) == ([3], 1)


def test_after_a_reconnect_the_presented_claim_says_whether_the_lock_was_taken_again():
    in_flight = InFlight()
    kept, lost = claim(1), claim(2)
    in_flight.hold([kept, lost])
    in_flight.relocked({2}, set())
    assert in_flight.presented(kept).locked and not in_flight.presented(lost).locked
    other = claim(3)
    assert in_flight.presented(other) is other  # not held: as given


def test_jobs_taken_back_while_the_session_was_gone_are_not_run_here_but_the_running_one_goes_on():
    in_flight = InFlight()
    finished, running, waiting, kept = claim(2), claim(1), claim(3), claim(4)
    in_flight.hold([finished, running, waiting, kept])
    run_next(in_flight)  # 2 ran already: its outcome waits to be written
    assert in_flight.start_next(MINUTE).claim == running
    in_flight.relocked({1, 2, 3}, {1, 2, 3})  # a reaper gave them back to pending meanwhile
    assert sorted(c.job_id for c in in_flight.held()) == [1, 2, 4]  # 1 runs on, 2's outcome will be rejected
    in_flight.finished()
    assert in_flight.start_next(MINUTE).claim.job_id == kept.job_id  # 3 does not run here
    in_flight.finished()
    assert in_flight.start_next(MINUTE) is None


@pytest.mark.parametrize(("size", "all_short", "expected"), [(1, True, 2), (32, True, 50), (16, False, 1)])
def test_the_next_claim_doubles_while_jobs_are_short_and_drops_to_one_after_a_long_one(size, all_short, expected):
    assert next_size(size, all_short=all_short, cap=50) == expected


def test_a_running_job_is_past_its_deadline_only_after_the_grace():
    in_flight = InFlight()
    in_flight.hold([claim(1)])
    assert not in_flight.past_deadline(0.0)  # no job running: no deadline
    in_flight.start_next(lambda claim: -0.5)  # a deadline half a second ago
    assert in_flight.past_deadline(0.1) and not in_flight.past_deadline(10.0)
    in_flight.finished()
    assert not in_flight.past_deadline(0.0)
