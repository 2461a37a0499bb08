"""A worker's jobs in flight: each job's stages, the boards and the handler's view they
write, the hand-off of outcomes between the worker's two threads, and the sizing rule
(no database)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import datetime, timezone

import psycopg
import pytest

from jobq.daemon.boards.finished import AREA
from jobq.daemon.worker.flight import InFlight, InvalidTransition, Outcome, Stage
from jobq.daemon.worker.heartbeat import Heartbeat
from jobq.daemon.worker.pacing import CLAIM_WORK, DEFER_RUNNING, FLUSH_AFTER, LINE_HOLD, Pace, next_size
from jobq.daemon.worker.outcomes import OutcomeWriter
from jobq.handlers import context
from jobq.handlers.execution import RunResult
from jobq.jobs.leases import Claim
from jobq.job import Job
from support.pacing import Schedule

pytestmark = [pytest.mark.unit, pytest.mark.daemon]

MINUTE = lambda claim: 60.0  # noqa: E731  (a job's timeout)
OK = RunResult('{"ok": true}', None, 0.001)
FAILED = RunResult(None, "Traceback ...", 0.001, "ValueError")
CANCELLED = RunResult(None, None, 0.001, cancelled=True)
SNOOZED = RunResult(None, None, 0.001, snooze=30.0)
TOO_LARGE = RunResult('"' + "x" * AREA + '"', None, 0.001)  # no room for it in the finished area


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
    assert next_size(size, ran=size, seconds=size * 0.0001, all_short=all_short, cap=50) == expected


@pytest.mark.parametrize(
    ("ran", "seconds", "expected"),
    [(64, 64 * 0.00001, 128), (64, 64 * 0.001, 100), (64, 64 * 0.02, 5), (64, 64 * 0.049, 2), (3, 0.0, 128)],
)
def test_the_next_claim_holds_at_most_claim_work_seconds_of_the_last_batchs_jobs(ran, seconds, expected):
    """noop jobs grow to the cap; 1 ms jobs to 100 (0.1 s of work); 20 ms jobs to 5; a
    batch that took no measurable time grows as before."""
    assert CLAIM_WORK == 0.1
    assert next_size(64, ran=ran, seconds=seconds, all_short=True, cap=500) == expected


def test_a_batch_that_has_run_line_hold_seconds_gives_back_its_line_and_the_next_claim_shrinks():
    """A claim of 500 sized on noop jobs whose next batch turned out to be 40 ms jobs
    (each under DEFER_RUNNING, so none is marked running): after LINE_HOLD seconds the
    batch stops and gives back what is in line, and the next claim holds CLAIM_WORK
    seconds of such jobs."""
    now = [0.0]
    pace = Pace(500, clock=lambda: now[0], schedule=Schedule())
    pace.size = 500
    pace.batch_started()
    went_on = []
    for _ in range(20):
        now[0] += 0.04
        went_on.append(pace.ran(0.04))
    assert LINE_HOLD == 0.5
    assert went_on.index(False) == 12  # after the 13th job: 0.52 s into the batch
    pace.batch_over()
    assert pace.size == int(CLAIM_WORK / 0.04) == 2


def test_a_batch_of_short_jobs_within_line_hold_doubles_the_claim_up_to_the_cap():
    now = [0.0]
    pace = Pace(500, clock=lambda: now[0], schedule=Schedule())
    sizes = []
    for _ in range(12):
        pace.batch_started()
        for _ in range(pace.size):
            now[0] += 0.00002
            assert pace.ran(0.00002)
        pace.batch_over()
        sizes.append(pace.size)
    assert sizes[:9] == [2, 4, 8, 16, 32, 64, 128, 256, 500] and set(sizes[9:]) == {500}


def test_a_running_job_is_past_its_deadline_only_after_the_grace():
    in_flight = InFlight()
    in_flight.hold([claim(1)])
    assert not in_flight.past_deadline(0.0)  # no job running: no deadline
    in_flight.start_next(lambda claim: -0.5)  # a deadline half a second ago
    assert in_flight.past_deadline(0.1) and not in_flight.past_deadline(10.0)
    in_flight.finished()
    assert not in_flight.past_deadline(0.0)


# -- the stages, and what each writes ----------------------------------------------------


def test_a_job_goes_through_its_stages_and_the_boards_show_what_the_supervisor_needs():
    in_flight = InFlight()
    assert in_flight.hold([claim(1)]) == []
    assert in_flight.job_board.running(0) is None and in_flight.finished_area.end() == 0
    flight = in_flight.start_next(MINUTE)
    assert flight.stage is Stage.STARTED
    shown = in_flight.job_board.running(0)  # before the handler is called
    assert (shown.job_id, shown.lease, shown.timeout) == (1, 10, 60.0)
    assert shown.deadline == pytest.approx(time.monotonic() + 60.0, abs=1.0)
    assert flight.run is not None and flight.run.job_id == 1  # the handler's view of its run
    in_flight.finished()
    assert flight.stage is Stage.FINISHED and in_flight.snapshot().running is None
    in_flight.buffer(Outcome(flight.claim, OK))
    assert flight.stage is Stage.BUFFERED and in_flight.finished_area.end() > 0  # noted for the supervisor
    taken = in_flight.take_outcomes()
    assert flight.stage is Stage.WRITING
    in_flight.written(taken, set())
    assert flight.stage is Stage.WRITTEN and in_flight.finished_area.end() == 0 and in_flight.held() == []
    assert in_flight.job_board.running(0).job_id == 1  # shown until the worker goes idle
    in_flight.idle()
    assert in_flight.job_board.running(0) is None


def test_claims_locked_elsewhere_never_fly_and_jobs_given_back_or_taken_away_are_let_go():
    in_flight = InFlight()
    refused = in_flight.hold([claim(1), claim(2, locked=False), claim(3), claim(4)])
    assert [c.job_id for c in refused] == [2]
    assert sorted(c.job_id for c in in_flight.held()) == [1, 3, 4]
    in_flight.relocked({3}, {3})
    assert [c.job_id for c in in_flight.take_waiting()] == [1, 4]  # 3 was taken away
    assert in_flight.held() == [] and in_flight.start_next(MINUTE) is None


def test_transitions_out_of_order_are_refused():
    in_flight = InFlight()
    in_flight.hold([claim(1), claim(2)])
    with pytest.raises(InvalidTransition):
        in_flight.finished()  # nothing runs
    flight = in_flight.start_next(MINUTE)
    with pytest.raises(InvalidTransition):
        in_flight.start_next(MINUTE)  # one job at a time
    with pytest.raises(InvalidTransition):
        in_flight.buffer(Outcome(flight.claim, OK))  # still running
    in_flight.finished()
    in_flight.buffer(Outcome(flight.claim, OK))
    with pytest.raises(InvalidTransition):
        in_flight.buffer(Outcome(flight.claim, OK))  # buffered once
    taken = in_flight.take_outcomes()
    in_flight.written(taken, set())
    with pytest.raises(InvalidTransition):
        in_flight.written(taken, set())  # ended once
    with pytest.raises(InvalidTransition):
        in_flight.returned(taken)


def test_an_outcome_noted_waits_flush_after_and_what_a_kill_would_lose_is_due_at_once():
    in_flight = InFlight()
    in_flight.hold([claim(i) for i in range(1, 6)])
    run_next(in_flight, OK)
    assert not in_flight.due()  # in the finished area: it may wait
    time.sleep(FLUSH_AFTER * 2)
    assert in_flight.due()
    in_flight.written(in_flight.take_outcomes(), set())
    for noted in (FAILED, SNOOZED):  # noted too
        run_next(in_flight, noted)
        assert not in_flight.due() and in_flight.finished_area.end() > 0
        in_flight.written(in_flight.take_outcomes(), set())
    run_next(in_flight, TOO_LARGE)
    assert in_flight.due() and in_flight.finished_area.end() == 0  # not noted: before the next job starts
    in_flight.written(in_flight.take_outcomes(), set())
    run_next(in_flight, CANCELLED)
    assert in_flight.due() and in_flight.finished_area.end() == 0  # nor is a cancelled run


def test_a_cancel_heard_before_the_start_marks_the_run_and_one_heard_while_it_runs_interrupts():
    in_flight = InFlight()
    in_flight.hold([claim(1), claim(2), claim(3, queue="mail"), claim(4)])
    assert in_flight.request_cancel(2) is False  # waiting: withdrawn, not interrupted
    in_flight.pause("mail")
    assert in_flight.request_cancel(1) is False  # not started yet
    assert [c.job_id for c in in_flight.take_withdrawn()] == [1, 2, 3]
    flight = in_flight.start_next(MINUTE)
    assert flight.job_id == 4 and not flight.run.cancel_requested
    assert in_flight.request_cancel(4) is False  # started, but its handler is not called yet
    assert flight.run.cancel_requested  # the handler will not be called
    context.begin(flight.run)
    try:
        assert context.cancel_requested() and in_flight.request_cancel(4) is True  # raise in it
    finally:
        context.end()
    assert in_flight.was_cancelled(4) and not in_flight.was_cancelled(5)
    in_flight.batch_over()
    assert not in_flight.was_cancelled(4)


def test_a_cancel_heard_before_a_job_is_held_still_withdraws_it():
    in_flight = InFlight()
    in_flight.request_cancel(7)  # the pipe was faster than the claim's answer
    in_flight.hold([claim(7), claim(8)])
    assert [c.job_id for c in in_flight.take_withdrawn()] == [7]
    assert in_flight.start_next(MINUTE).job_id == 8


# -- the hand-off of outcomes between the two threads ------------------------------------


def test_outcomes_taken_are_one_threads_until_written_or_returned():
    in_flight = InFlight()
    in_flight.hold([claim(1), claim(2), claim(3)])
    run_next(in_flight, TOO_LARGE)
    taken = in_flight.take_outcomes()
    assert in_flight.take_outcomes() is None  # out with one thread: nothing for the other
    run_next(in_flight)
    assert in_flight.take_outcomes() is None  # not even what was buffered since
    in_flight.returned(taken)  # its write failed
    assert in_flight.due()  # as unnoted as it was
    again = in_flight.take_outcomes()
    assert [f.job_id for f in again.flights] == [1, 2]  # the returned first, none lost
    in_flight.written(again, set())
    assert in_flight.snapshot().recorded == 2 and [c.job_id for c in in_flight.held()] == [3]


class BrokenSession:
    """A claim session whose every call fails as a statement the database refuses."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls = 0

    def run(self, call):  # type: ignore[no-untyped-def]
        self.calls += 1
        raise psycopg.errors.RaiseException("refused")


def test_a_write_that_fails_returns_its_outcomes_to_the_buffer():
    in_flight = InFlight()
    in_flight.hold([claim(1)])
    run_next(in_flight)
    writer = OutcomeWriter(in_flight, worker_id="w", lock_base=0)
    with pytest.raises(psycopg.Error):
        writer.write(BrokenSession())  # type: ignore[arg-type]
    taken = in_flight.take_outcomes()
    assert [f.job_id for f in taken.flights] == [1] and in_flight.finished_area.end() > 0


def test_after_a_failed_write_the_heartbeat_leaves_the_outcomes_to_the_main_thread_until_its_next_beat():
    in_flight, session = InFlight(), BrokenSession()
    in_flight.hold([claim(1)])
    run_next(in_flight, TOO_LARGE)
    writer = OutcomeWriter(in_flight, worker_id="w", lock_base=0)
    beat = Heartbeat(
        session, in_flight, writer,  # type: ignore[arg-type]
        worker_id="w", announce=lambda conn: None, interval=60.0, parent_pid=0, orphaned=lambda: None,
    )
    with pytest.raises(psycopg.Error):
        beat.write_outcomes()
    beat.write_outcomes()  # not again before the next beat: no call, no error
    assert session.calls == 1 and in_flight.due()  # still buffered, for the main thread's write


def test_two_threads_writing_outcomes_write_each_once_by_one_of_them_and_lose_none():
    """The main thread runs jobs and writes when it likes; the heartbeat thread writes
    too; both writes fail now and then. Every outcome is written exactly once, by one
    of the two threads; none stays behind, in flight or in the finished area."""
    in_flight, n = InFlight(), 3000
    in_flight.hold([claim(i) for i in range(1, n + 1)])
    written_by: Counter[tuple[int, str]] = Counter()
    ran = threading.Event()

    def write(who: str) -> None:
        taken = in_flight.take_outcomes()
        if taken is None:
            time.sleep(0.0001)  # nothing to take: the next tick
            return
        time.sleep(random.random() / 10_000)  # the round trip
        if random.random() < 0.2:
            in_flight.returned(taken)  # a failed write
            return
        written_by.update((f.job_id, who) for f in taken.flights)
        in_flight.written(taken, set())

    def heartbeat() -> None:
        while not ran.is_set():
            write("heartbeat")
        deadline = time.monotonic() + 10
        while in_flight.held() and time.monotonic() < deadline:  # what the main thread left
            write("heartbeat")

    thread = threading.Thread(target=heartbeat)
    thread.start()
    try:
        for i in range(n):
            run_next(in_flight, OK if i % 7 else FAILED)
            if i % 10 == 0:
                time.sleep(0.0002)  # a longer handler: the heartbeat's turn
            elif random.random() < 0.3:
                write("main")
    finally:
        ran.set()
        thread.join(30)
    ids = Counter(job_id for job_id, _ in written_by)
    assert sorted(ids) == list(range(1, n + 1)) and set(ids.values()) == {1}  # each once, none lost
    assert {who for _, who in written_by} == {"main", "heartbeat"}  # both wrote
    assert in_flight.held() == [] and in_flight.snapshot().recorded == n
    assert in_flight.finished_area.take() == []  # nothing left for the supervisor to pass on
