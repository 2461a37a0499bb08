"""A worker's batch: the state its two threads share, and the sizing rule (no database)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from jobq.jobs.leases import Claim
from jobq.daemon.worker import hand as batch
from jobq.daemon.worker.hand import DEFER_RUNNING, Hand
from jobq.job import Job

pytestmark = [pytest.mark.unit, pytest.mark.daemon]


def claim(job_id: int, locked: bool = True) -> Claim:
    now = datetime.now(timezone.utc)
    job = Job(
        id=job_id, type="noop", queue="default", payload={}, status="claimed", priority=5, attempt=0,
        max_retries=3, run_at=now, claimed_at=now, started_at=None, heartbeat_at=now, completed_at=None,
        created_at=now, result=None, error=None, errors=[], worker_id="w", lease=job_id * 10,
    )
    return Claim(job, job_id * 10, locked)


def test_jobs_run_in_the_order_lined_up_and_the_running_one_is_known():
    hand = Hand()
    jobs = [claim(1), claim(2)]
    hand.hold(jobs)
    hand.line_up(jobs)
    assert hand.start_next() == jobs[0]
    assert hand.in_hand().running == 1
    hand.finished()
    assert hand.in_hand().running is None
    assert hand.start_next() == jobs[1]
    assert hand.start_next() is None


def test_a_job_past_defer_running_is_overdue_once_with_the_jobs_waiting_behind_it():
    hand = Hand()
    jobs = [claim(1), claim(2), claim(3)]
    hand.hold(jobs)
    hand.line_up(jobs)
    hand.start_next()
    assert hand.overdue() is None  # just started
    time.sleep(DEFER_RUNNING * 1.5)
    overdue = hand.overdue()
    assert overdue is not None
    assert overdue.claim == jobs[0] and overdue.elapsed >= DEFER_RUNNING
    assert overdue.waiting == jobs[1:]
    assert hand.overdue() is None  # marked once
    assert hand.start_next() is None  # the waiting jobs left the line


def test_forgetting_recorded_jobs_counts_the_accepted_ones():
    hand = Hand()
    hand.hold([claim(1), claim(2), claim(3)])
    assert [c.job_id for c in hand.forget([1, 2], recorded=1)] == [1, 2]
    assert [c.job_id for c in hand.forget([2])] == []  # already let go
    now = hand.in_hand()
    assert ([c.job_id for c in now.held], now.recorded) == ([3], 1)


def test_after_a_reconnect_the_presented_claim_says_whether_the_lock_was_taken_again():
    hand = Hand()
    kept, lost = claim(1), claim(2)
    hand.hold([kept, lost])
    hand.relocked({2}, set())
    assert hand.presented(kept).locked and not hand.presented(lost).locked
    other = claim(3)
    assert hand.presented(other) is other  # not held: as given


def test_jobs_taken_back_while_the_session_was_gone_are_not_run_here_but_the_running_one_goes_on():
    hand = Hand()
    running, finished, waiting, kept = claim(1), claim(2), claim(3), claim(4)
    hand.hold([running, finished, waiting, kept])
    hand.line_up([running, waiting, kept])  # 2 ran already: its outcome waits to be written
    assert hand.start_next() == running
    hand.relocked({1, 2, 3}, {1, 2, 3})  # a reaper gave them back to pending meanwhile
    assert [c.job_id for c in hand.held()] == [1, 2, 4]  # 1 runs on, 2's outcome will be rejected
    assert hand.start_next() == kept and hand.start_next() is None  # 3 does not run here


@pytest.mark.parametrize(("size", "all_short", "expected"), [(1, True, 2), (32, True, 50), (16, False, 1)])
def test_the_next_claim_doubles_while_jobs_are_short_and_drops_to_one_after_a_long_one(size, all_short, expected):
    assert batch.next_size(size, all_short=all_short, cap=50) == expected


def test_a_running_job_is_past_its_deadline_only_after_the_grace():
    hand = Hand()
    job = claim(1)
    hand.hold([job])
    hand.line_up([job])
    hand.start_next()
    assert not hand.past_deadline(0.0)  # no deadline known yet
    hand.runs_until(time.monotonic() - 0.5)
    assert hand.past_deadline(0.1) and not hand.past_deadline(10.0)
    hand.finished()
    assert not hand.past_deadline(0.0)
