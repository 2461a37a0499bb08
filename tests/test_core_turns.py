"""Turns at the cores (jobq.daemon.boards.cores, JOBQ_SHORT_JOB_WORKERS): no more of a
supervisor's workers run batches of short CPU-bound jobs at once than it has tokens;
workers whose jobs wait on I/O are not held back."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time

import psycopg
import pytest

import jobq
from jobq.daemon.boards.cores import CoreTokens
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.wakeup import SelfPipe
from jobq.daemon.worker.pacing import Pace
from jobq.daemon.worker.turns import TURN_WAIT_MAX, Turns
from support.pacing import Schedule, Waits
from support.waiting import wait_for

FORK = multiprocessing.get_context("fork")


class Answers:
    """What the children say, each on a pipe of its own: a child killed (SIGKILL) while
    it held a shared queue's write lock left the lock taken, and the next children's
    answers never came (a multiprocessing.Queue)."""

    def __init__(self) -> None:
        self.pipes: list = []

    def pipe(self):
        """A new child's end; this side is kept to read its answer."""
        mine, theirs = FORK.Pipe(duplex=False)
        self.pipes.append(mine)
        return theirs

    def get(self, timeout: float) -> tuple[int, bool]:
        """The next answer of any child, waiting up to ``timeout`` seconds."""
        ready = multiprocessing.connection.wait(self.pipes, timeout)
        assert ready, f"no child answered within {timeout} s"
        self.pipes.remove(ready[0])
        return ready[0].recv()


def _hold(tokens: CoreTokens, answer) -> None:
    """In a child: try for a token, say whether it was had, and hold on (until killed)."""
    answer.send((os.getpid(), tokens.take()))
    time.sleep(60)


def _holders(tokens: CoreTokens, took: Answers, n: int) -> list:
    children = [FORK.Process(target=_hold, args=(tokens, took.pipe())) for _ in range(n)]
    for child in children:
        child.start()
    return children


def _kill(*children) -> None:
    for child in children:
        child.kill()  # SIGKILL: a process's record locks go with it
        child.join(10)


@pytest.mark.daemon
def test_no_more_processes_hold_a_token_than_there_are_tokens_and_a_killed_holder_frees_its_own():
    tokens, took = CoreTokens(2), Answers()
    children = _holders(tokens, took, 4)
    answers = dict(took.get(timeout=10) for _ in children)
    assert sorted(answers.values()) == [False, False, True, True]
    _kill(*(child for child in children if answers[child.pid]))  # both holders
    late = _holders(tokens, took, 2)
    assert sorted(had for _, had in (took.get(timeout=10), took.get(timeout=10))) == [True, True]
    _kill(*children, *late)


@pytest.mark.daemon
def test_a_token_given_back_is_had_by_the_next_process_and_zero_tokens_hold_back_nobody():
    tokens, took = CoreTokens(1), Answers()
    assert tokens.take() and tokens.held  # this process
    first = _holders(tokens, took, 1)
    assert took.get(timeout=10)[1] is False
    tokens.give_back()
    assert not tokens.held
    second = _holders(tokens, took, 1)
    assert took.get(timeout=10)[1] is True
    _kill(*first, *second)
    assert CoreTokens(0).take()  # no limit: always a turn


class Counted(CoreTokens):
    """Tokens that count this process's looks for one."""

    def __init__(self, tokens: int) -> None:
        super().__init__(tokens)
        self.looks = 0

    def take(self, first: int = 0) -> bool:
        self.looks += 1
        return super().take(first)


def _turns(tokens: CoreTokens) -> Turns:
    return Turns(tokens, 0, wakeup=SelfPipe(), stopping=threading.Event(), after_wait=lambda: None)


@pytest.mark.daemon
def test_a_first_claim_goes_without_a_token_while_one_is_free_and_waits_for_one_while_all_are_held():
    tokens, took = Counted(1), Answers()
    turns = _turns(tokens)
    assert turns.take(False, flush=lambda: None, first=True)
    assert not tokens.held  # one was free: not kept for a claim of one job
    holder = _holders(tokens, took, 1)
    assert took.get(timeout=10)[1] is True
    assert turns.take(False, flush=lambda: None)  # a later claim of one job: no token asked for
    assert not tokens.held
    flushed = []
    killer = FORK.Process(target=_kill_after, args=(holder[0].pid, 0.5))
    killer.start()
    started = time.monotonic()
    assert turns.take(False, flush=lambda: flushed.append(True), first=True)
    waited = time.monotonic() - started
    assert tokens.held and flushed == [True]  # waited for the holder's token, its outcomes written first
    assert 0.3 < waited < 5
    tokens.give_back()
    killer.join(10)
    _kill(*holder)


def _kill_after(pid: int, seconds: float) -> None:
    time.sleep(seconds)
    os.kill(pid, signal.SIGKILL)


@pytest.mark.daemon
def test_a_worker_waiting_for_a_token_looks_less_and_less_often_and_still_takes_one_soon_after_it_is_free():
    tokens, took = Counted(1), Answers()
    holder = _holders(tokens, took, 1)
    assert took.get(timeout=10)[1] is True
    killer = FORK.Process(target=_kill_after, args=(holder[0].pid, 1.0))
    killer.start()
    board, seen = IdleBoard(), []  # what the supervisor sees of the worker meanwhile
    turns = Turns(tokens, 0, wakeup=SelfPipe(), stopping=threading.Event(), board=board,
                  after_wait=lambda: seen.append((board.spare(0), board.idle(0))))
    started = time.monotonic()
    assert turns.take(True, flush=lambda: None)
    waited = time.monotonic() - started
    assert seen and set(seen) == {(True, False)}  # spare for the pool, not idle for a notification
    assert not board.spare(0)  # it has its turn: busy
    # At a steady 5 ms it looked about 200 times in the second; backing off to TURN_WAIT_MAX,
    # about 30.
    assert tokens.looks < 60, tokens.looks
    assert tokens.held
    assert 0.9 < waited < 1.0 + 10 * TURN_WAIT_MAX  # taken within a few looks of the holder's death
    killer.join(10)
    tokens.give_back()
    _kill(*holder)


@pytest.mark.unit
def test_a_token_file_broken_under_a_worker_lets_it_run_without_turns_instead_of_waiting_for_ever():
    """Only a lock held by another process means "not now"; any other error of the lock
    (here the descriptor replaced by a read-only one, as a handler that closes every
    descriptor and opens others could leave it) and the worker runs without turns."""
    tokens = CoreTokens(1)
    assert tokens.take()
    tokens.give_back()
    read_only = os.open(os.devnull, os.O_RDONLY)
    os.dup2(read_only, tokens._file.fileno())
    os.close(read_only)
    assert tokens.take() and tokens.take()  # EBADF: not read as another worker's token
    tokens.give_back()


@pytest.mark.unit
def test_a_batch_of_short_jobs_that_did_not_block_wants_a_core_and_one_that_blocked_or_ran_long_does_not():
    waits = Waits()
    pace = Pace(500, waits=waits, schedule=Schedule())
    assert not pace.wants_a_core  # nothing known yet: a claim of one, without a token

    def batch(jobs: int, blocked: int, seconds: float = 0.001) -> None:
        pace.batch_started()
        for _ in range(jobs):
            pace.ran(seconds)
        waits.n += blocked
        pace.batch_over()

    batch(1, blocked=0)
    assert pace.size == 2 and pace.wants_a_core
    batch(2, blocked=1)  # less than once a job: CPU-bound still
    assert pace.size == 4 and pace.wants_a_core
    batch(4, blocked=4)  # once a job: waiting on I/O
    assert pace.size == 8 and not pace.cpu_bound and not pace.wants_a_core
    batch(8, blocked=0)
    assert pace.wants_a_core
    batch(8, blocked=0, seconds=0.2)  # a long job: a claim of one again, no token
    assert pace.size == 1 and pace.cpu_bound and not pace.wants_a_core
    assert not Pace(500, waits=None).wants_a_core


def _overlap_share(conn: psycopg.Connection) -> float:
    """Of the time some worker ran a job, the share when two or more did (wall clock of
    the handlers' own processes, from their results)."""
    runs = [row[0] for row in conn.execute("SELECT result FROM jobs WHERE status = 'done'")]
    events = sorted([(r["started"], 1, r["pid"]) for r in runs] + [(r["ended"], -1, r["pid"]) for r in runs])
    running: dict[int, int] = {}
    busy = together = 0.0
    last = events[0][0]
    for at, step, pid in events:
        pids = sum(1 for n in running.values() if n > 0)
        busy += (at - last) if pids >= 1 else 0.0
        together += (at - last) if pids >= 2 else 0.0
        running[pid] = running.get(pid, 0) + step
        last = at
    return together / busy


def _drain(daemon, conn: psycopg.Connection, job_type: str, n: int, seconds: float, tokens: int) -> float:
    jobq.enqueue_many([{"type": job_type, "payload": {"seconds": seconds}}] * n, conn=conn)
    worker = daemon(3, JOBQ_SHORT_JOB_WORKERS=str(tokens))
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] == n, 120, f"{n} {job_type} jobs done")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0  # workers waiting for a turn stop when told
    return _overlap_share(conn)


@pytest.mark.daemon
def test_one_token_lets_one_worker_at_a_time_run_short_cpu_bound_jobs(daemon, conn):
    share = _drain(daemon, conn, "timed_burn", 1500, 0.001, tokens=1)
    assert share < 0.2, share  # the workers' first claims of one job each run side by side, then one at a time


@pytest.mark.daemon
def test_without_a_limit_the_same_jobs_run_in_every_worker_at_once(daemon, conn):
    share = _drain(daemon, conn, "timed_burn", 900, 0.001, tokens=0)
    assert share > 0.4, share


@pytest.mark.daemon
def test_workers_whose_short_jobs_wait_on_io_are_not_held_back(daemon, conn):
    share = _drain(daemon, conn, "timed_sleep", 900, 0.002, tokens=1)
    assert share > 0.4, share


@pytest.mark.daemon
def test_a_job_that_turns_out_long_gives_its_workers_turn_to_another(daemon, conn):
    """One token, two workers: while one runs a 2 s job its turn is over (the heartbeat's
    long-job rule), so the other runs the short jobs meanwhile instead of waiting 2 s."""
    short = {"type": "timed_burn", "payload": {"seconds": 0.001}}
    jobq.enqueue_many([short] * 300, conn=conn)
    long = jobq.enqueue("timed_burn", {"seconds": 2.0}, conn=conn)
    jobq.enqueue_many([short] * 600, conn=conn)
    worker = daemon(2, JOBQ_SHORT_JOB_WORKERS="1")
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] == 901, 120, "901 jobs done")
    worker.stop()
    ran = jobq.get(long.id, conn=conn).result
    meanwhile = [r for (r,) in conn.execute("SELECT result FROM jobs WHERE id <> %s", (long.id,))
                 if r["pid"] != ran["pid"] and ran["started"] < r["started"] < ran["ended"]]
    assert len(meanwhile) > 100, len(meanwhile)
