"""The supervisor's decisions, in process: spawn, reap, murder, manage, stop.

As Gunicorn tests its arbiter, fork, waitpid and kill are replaced by a fake
(:class:`FakeSystem`) that hands out pids and lets the test say which child exits
how. Nothing here forks or touches a database: what a worker or the maintenance
process then does is tested end to end in test_daemon_*.py.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from jobq.daemon import messages as reports
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.processes import CancelRequest, MaintenanceProcess, System
from jobq.daemon.supervisor import EXIT_HALTED, Halt, Supervisor
from jobq.daemon.wakeup import SelfPipe
from jobq.daemon.exits import EXIT_BOOT_ERROR, EXIT_OK
from jobq.daemon.pool import IDLE_RETIRE
from jobq.settings import Settings

pytestmark = [pytest.mark.unit, pytest.mark.daemon]

KILLED = signal.SIGKILL  # a wait status of a process killed by a signal is the signal's number


def exited(code: int) -> int:
    """The wait status of a process that exited with ``code``."""
    return code << 8


class FakeSystem(System):
    """Children that do what they are told: TERM makes a worker exit cleanly (as a
    worker does after its job), KILL kills it; the test adds other exits."""

    def __init__(self) -> None:
        self.next_pid = 1000
        self.exits: list[tuple[int, int]] = []  # (pid, wait status), reaped in order
        self.sent: list[tuple[int, int]] = []  # (pid, signal)
        self.forked: list[int] = []

    def fork(self) -> int:
        self.next_pid += 1
        self.forked.append(self.next_pid)
        return self.next_pid

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        for i, (child, status) in enumerate(self.exits):
            if pid in (-1, child):
                return self.exits.pop(i)
        if not options & os.WNOHANG:
            raise AssertionError(f"a blocking wait for {pid}, which will never exit")
        return 0, 0

    def set_process_group(self, pid: int) -> None:
        pass

    def kill(self, pid: int, signum: int, *, group: bool = False) -> None:
        self.sent.append((pid, signum))
        if signum == signal.SIGKILL:
            self.exit(pid, KILLED)
        elif signum == signal.SIGTERM:
            self.exit(pid, exited(EXIT_OK))

    def exit(self, pid: int, status: int) -> None:
        if all(child != pid for child, _ in self.exits):
            self.exits.append((pid, status))


@pytest.fixture
def system() -> FakeSystem:
    return FakeSystem()


@pytest.fixture
def supervisor(system: FakeSystem):
    """A supervisor of 3 workers whose maintenance process's pipes the test reads
    (``told``) and writes (``control``)."""
    yield from supervised(system, concurrency=3, min_workers=3)


@pytest.fixture
def growing(system: FakeSystem):
    """A supervisor of 2 workers that may grow to 8."""
    yield from supervised(system, concurrency=8, min_workers=2)


def supervised(system: FakeSystem, **settings: object):
    sup = Supervisor(Settings.from_env({}, graceful_timeout=5, cancel_grace=2, **settings), system)
    sup.wakeup = SelfPipe()
    sup.spawn_maintenance()
    read_fd, write_fd = reports.report_pipe()
    control_read, sup.control = reports.report_pipe()
    sup.maintenance.close()  # the fake child never reads or writes them: the test does
    sup.maintenance = MaintenanceProcess(sup.maintenance.pid, write_fd, reports.Reader(control_read))
    sup.told = reports.Reader(read_fd)
    yield sup
    for proc in sup.workers.values():
        os.close(proc.reader.fd)
        os.close(proc.control_fd)
    os.close(read_fd)
    os.close(sup.control)
    if sup.maintenance is not None:
        sup.maintenance.close()


def gone_reports(sup: Supervisor) -> list[reports.Gone]:
    messages, _ = sup.told.read()
    return [m for m in messages if isinstance(m, reports.Gone)]


def running(job_id: int, *, deadline_in: float, timeout: float = 60.0) -> reports.Started:
    return reports.Started(job_id, job_id * 10, time.monotonic() + deadline_in, timeout)


def test_manage_spawns_the_configured_number_of_workers_each_in_its_own_slot(supervisor, system):
    supervisor.manage_workers()
    assert len(supervisor.workers) == 3
    assert sorted(proc.slot for proc in supervisor.workers.values()) == [0, 1, 2]
    supervisor.manage_workers()
    assert len(supervisor.workers) == 3  # holds the count, spawns no more


def test_a_worker_that_dies_is_replaced_and_maintenance_is_told_its_running_job(supervisor, system):
    supervisor.manage_workers()
    pid, proc = next(iter(supervisor.workers.items()))
    proc.spawned -= 60  # long after its spawn: a crash, not a crash loop
    proc.show(running(7, deadline_in=60))
    system.exit(pid, KILLED)
    supervisor.reap_workers()
    supervisor.manage_workers()
    assert pid not in supervisor.workers and len(supervisor.workers) == 3
    (gone,) = gone_reports(supervisor)
    assert (gone.worker_id, gone.job_id, gone.lease, gone.kind) == (proc.worker_id, 7, 70, "crash")
    assert gone.detail == "killed by signal 9 (SIGKILL)"


def test_maintenance_hears_of_every_worker_spawned_and_a_new_one_of_every_live_worker(supervisor, system, monkeypatch):
    supervisor.manage_workers()
    live = {proc.worker_id for proc in supervisor.workers.values()}
    messages, _ = supervisor.told.read()
    assert {m.worker_id for m in messages if isinstance(m, reports.Spawned)} == live
    kept: list[int] = []  # the new maintenance process's end of its pipe, read here instead

    def pipe() -> tuple[int, int]:
        read_fd, write_fd = real_pipe()
        kept.append(os.dup(read_fd))
        return read_fd, write_fd

    real_pipe = reports.report_pipe
    monkeypatch.setattr(reports, "report_pipe", pipe)
    old, supervisor.maintenance = supervisor.maintenance, None  # it died
    old.close()
    supervisor.manage_maintenance()
    told, _ = reports.Reader(kept[0]).read()
    assert {m.worker_id for m in told if isinstance(m, reports.Spawned)} == live
    for fd in kept:
        os.close(fd)


def test_a_replacement_takes_the_slot_its_predecessor_freed(supervisor, system):
    supervisor.manage_workers()
    pid, proc = next(iter(supervisor.workers.items()))
    proc.spawned -= 60
    system.exit(pid, exited(EXIT_OK))
    supervisor.reap_workers()
    supervisor.manage_workers()
    assert sorted(p.slot for p in supervisor.workers.values()) == [0, 1, 2]
    (gone,) = gone_reports(supervisor)
    assert (gone.job_id, gone.kind, gone.detail) == (0, "shutdown", "exit code 0")


def test_murder_kills_a_worker_past_its_jobs_deadline_as_a_timeout(supervisor, system):
    supervisor.manage_workers()
    late, on_time = list(supervisor.workers)[:2]
    supervisor.workers[late].show(running(5, deadline_in=-0.1, timeout=2))
    supervisor.workers[on_time].show(running(6, deadline_in=60))
    supervisor.murder_workers()
    assert system.sent == [(late, signal.SIGKILL)]
    supervisor.murder_workers()
    assert system.sent == [(late, signal.SIGKILL)]  # killed once, for its first reason
    supervisor.reap_workers()
    (gone,) = gone_reports(supervisor)
    assert (gone.job_id, gone.kind, gone.timeout) == (5, "timeout", 2.0)


class MovingOn(JobBoard):
    """A board whose worker finishes its job right after each read (what a live worker
    may do between two reads of its record by the supervisor)."""

    def running(self, slot: int) -> reports.Started | None:
        started = super().running(slot)
        self.show(slot, None)
        return started


def test_a_worker_finishing_its_job_while_the_supervisor_looks_is_no_trouble(supervisor, system):
    supervisor.manage_workers()
    for proc in supervisor.workers.values():
        proc.jobs = MovingOn(4)
        proc.show(running(5, deadline_in=60))
    supervisor.murder_workers()  # reads each record once (it raised when it read twice)
    assert system.sent == []
    for proc in supervisor.workers.values():
        proc.show(running(6, deadline_in=-1))
    supervisor.murder_workers()
    assert len(system.sent) == 3


def test_a_retired_worker_past_the_graceful_timeout_is_killed_as_a_shutdown(supervisor, system):
    supervisor.manage_workers()
    pid, proc = next(iter(supervisor.workers.items()))
    proc.show(running(8, deadline_in=60))
    system.kill = lambda p, s, group=False: system.sent.append((p, s))  # TERM ignored: a long job
    supervisor.retire(proc)
    assert system.sent == [(pid, signal.SIGTERM)]
    supervisor.murder_workers()
    assert proc.kill_kind is None  # within the graceful timeout
    proc.retire_deadline = time.monotonic() - 0.1
    supervisor.murder_workers()
    assert proc.kill_kind == "shutdown" and system.sent[-1] == (pid, signal.SIGKILL)


def test_a_worker_that_cannot_boot_halts_the_supervisor(supervisor, system):
    supervisor.manage_workers()
    pid, proc = next(iter(supervisor.workers.items()))
    proc.boot_error = "cannot import handler modules ('missing',)"
    system.exit(pid, exited(EXIT_BOOT_ERROR))
    with pytest.raises(Halt) as halted:
        supervisor.reap_workers()
    assert halted.value.code == EXIT_HALTED and "missing" in halted.value.reason


def test_workers_that_die_idle_right_after_their_spawn_back_off_per_slot(supervisor, system):
    supervisor.manage_workers()
    first, *others = supervisor.workers.values()
    system.exit(first.pid, exited(1))
    supervisor.reap_workers()
    supervisor.manage_workers()
    assert list(supervisor.workers.values()) == others  # its slot waits; the others go on
    assert supervisor.respawns.waiting() == {first.slot}
    for _ in range(2):  # crashes again as soon as it is back: the wait doubles
        supervisor.respawns._until[first.slot] = 0.0
        supervisor.manage_workers()
        (again,) = [p for p in supervisor.workers.values() if p.slot == first.slot]
        system.exit(again.pid, exited(1))
        supervisor.reap_workers()
    assert supervisor.respawns._delay[first.slot] == 2.0  # 0.5, 1, 2
    supervisor.manage_workers()
    assert len(supervisor.workers) == 2


def test_a_worker_killed_by_its_job_is_replaced_at_once_however_often(supervisor, system):
    supervisor.manage_workers()
    for job_id in range(1, 6):  # a poison job kills every worker that runs it
        proc = next(iter(supervisor.workers.values()))
        proc.show(running(job_id, deadline_in=60))
        system.exit(proc.pid, KILLED)
        supervisor.reap_workers()
        supervisor.manage_workers()
        assert len(supervisor.workers) == 3 and supervisor.respawns.waiting() == set()
    assert [g.kind for g in gone_reports(supervisor)] == ["crash"] * 5


def test_ttou_retires_the_oldest_worker_and_ttin_adds_one(supervisor, system):
    supervisor.manage_workers()
    oldest = min(supervisor.workers.values(), key=lambda p: p.spawned)
    supervisor.dispatch(signal.SIGTTOU)
    supervisor.manage_workers()
    assert system.sent == [(oldest.pid, signal.SIGTERM)] and oldest.retiring
    supervisor.dispatch(signal.SIGTTIN)
    supervisor.manage_workers()
    assert sum(not p.retiring for p in supervisor.workers.values()) == 3


def test_hup_retires_every_worker_and_spawns_their_replacements(supervisor, system):
    supervisor.manage_workers()
    old = set(supervisor.workers)
    supervisor.dispatch(signal.SIGHUP)
    assert {pid for pid, s in system.sent if s == signal.SIGTERM} == old
    assert len([p for p in supervisor.workers.values() if not p.retiring]) == 3


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_term_and_int_stop_gracefully_then_stop_maintenance(supervisor, system, signum):
    supervisor.manage_workers()
    workers, maintenance = set(supervisor.workers), supervisor.maintenance.pid
    assert supervisor.dispatch(signum) == EXIT_OK
    assert supervisor.workers == {} and supervisor.stopping
    assert [pid for pid, _ in system.sent] == [*workers, maintenance]
    assert all(s == signal.SIGTERM for _, s in system.sent)
    assert {g.kind for g in gone_reports(supervisor)} == {"shutdown"}


def test_quit_kills_every_worker_at_once(supervisor, system):
    supervisor.manage_workers()
    workers = set(supervisor.workers)
    assert supervisor.dispatch(signal.SIGQUIT) == EXIT_OK
    assert {pid for pid, s in system.sent if s == signal.SIGKILL} == workers
    assert len(gone_reports(supervisor)) == 3


def control_pipe_of(proc) -> reports.Reader:
    """Stand in for the worker's end of its control pipe (the fake child has none)."""
    read_fd, write_fd = reports.report_pipe()
    os.set_blocking(write_fd, False)
    os.close(proc.control_fd)
    proc.control_fd = write_fd
    return reports.Reader(read_fd)


def test_a_cancel_reaches_every_busy_worker_and_kills_the_one_running_it_after_the_grace(supervisor, system):
    supervisor.manage_workers()
    runner, other, idle = supervisor.workers.values()
    runner.show(running(7, deadline_in=60))
    other.show(running(8, deadline_in=60))
    pipes = [control_pipe_of(proc) for proc in (runner, other, idle)]
    system.kill = lambda p, s, group=False: system.sent.append((p, s))  # the handler ignores it
    os.write(supervisor.control, reports.encode(reports.Cancel(7)))
    supervisor.read_reports()
    # Both busy workers are told (the cancelled job may wait in the other's batch); the
    # idle one has no batch, and may not have its handler for the signal yet.
    assert system.sent == [(runner.pid, signal.SIGUSR1), (other.pid, signal.SIGUSR1)]
    assert [pipe.read()[0] for pipe in pipes] == [[reports.Cancel(7)], [reports.Cancel(7)], []]
    supervisor.murder_workers()
    assert runner.kill_kind is None  # within the grace
    runner.cancelling = CancelRequest(7, time.monotonic() - 0.1)
    supervisor.murder_workers()
    assert runner.kill_kind == "cancel" and system.sent[-1] == (runner.pid, signal.SIGKILL)
    assert other.kill_kind is None and idle.kill_kind is None
    system.exit(runner.pid, KILLED)
    supervisor.reap_workers()
    supervisor.manage_workers()
    (gone,) = gone_reports(supervisor)
    assert (gone.job_id, gone.kind) == (7, "cancel")
    assert len(supervisor.workers) == 3  # the slot is refilled at once: no crash backoff
    for pipe in pipes:
        os.close(pipe.fd)


def test_a_cancelled_run_that_ended_on_its_own_is_not_killed(supervisor, system):
    supervisor.manage_workers()
    proc = next(iter(supervisor.workers.values()))
    proc.show(running(7, deadline_in=60))
    pipe = control_pipe_of(proc)
    system.kill = lambda p, s, group=False: system.sent.append((p, s))
    os.write(supervisor.control, reports.encode(reports.Cancel(7)))
    supervisor.read_reports()
    assert proc.cancelling is not None and proc.cancelling.job_id == 7
    proc.cancelling = CancelRequest(7, time.monotonic() - 0.1)  # the grace is over, but...
    proc.show(running(9, deadline_in=60))  # ...it has moved on to its next job
    supervisor.murder_workers()
    assert proc.kill_kind is None
    os.close(pipe.fd)


def test_a_graceful_stop_says_how_long_it_waits_for_which_jobs_then_names_each_job_killed(supervisor, system, caplog):
    supervisor.settings = supervisor.settings.model_copy(update={"graceful_timeout": 0.3})
    supervisor.manage_workers()
    busy = list(supervisor.workers.values())[:2]
    for job_id, proc in zip((8, 9), busy):
        proc.show(running(job_id, deadline_in=60))
    original = system.kill

    def kill(pid: int, signum: int, *, group: bool = False) -> None:  # TERM ignored by the busy ones: long jobs
        if signum == signal.SIGTERM and pid in {p.pid for p in busy}:
            system.sent.append((pid, signum))
        else:
            original(pid, signum, group=group)

    system.kill = kill
    with caplog.at_level(logging.INFO, logger="jobq.daemon.supervisor"):
        supervisor.stop(graceful=True)
    lines = [r.getMessage() for r in caplog.records]
    assert "supervisor.draining jobs=8,9: waiting up to 0.3 s for 2 running jobs" in lines[0]
    killed = [line for line in lines if line.startswith("supervisor.graceful_timeout")]
    assert sorted(line.split("job=")[1].split(":")[0] for line in killed) == ["8", "9"]


def test_a_maintenance_process_that_cannot_start_halts_the_supervisor(supervisor, system):
    system.exit(supervisor.maintenance.pid, exited(EXIT_BOOT_ERROR))
    with pytest.raises(Halt, match="maintenance process failed to start"):
        supervisor.reap_workers()


def test_a_maintenance_process_dying_at_start_is_respawned_after_a_growing_wait(supervisor, system):
    """Respawned at once, it would crash-loop (and flood the log) as fast as it can fork."""
    for expected_wait in (0.5, 1.0):
        dead = supervisor.maintenance
        dead.spawned = time.monotonic()  # it dies right after its start
        system.exit(dead.pid, exited(1))
        supervisor.reap_workers()
        supervisor.manage_maintenance()
        assert supervisor.maintenance is None  # not yet: waiting
        until = max(supervisor.maintenance_respawns._until.values())
        assert until - time.monotonic() == pytest.approx(expected_wait, abs=0.2)
        supervisor.maintenance_respawns._until.clear()  # the wait is over
        supervisor.manage_maintenance()
        assert supervisor.maintenance is not None and supervisor.maintenance.pid != dead.pid


def active(sup: Supervisor) -> list:
    return sorted((p for p in sup.workers.values() if not p.retiring), key=lambda p: p.slot)


def test_a_pool_starts_at_its_least_and_doubles_up_to_its_most_while_busy_workers_block(growing, system):
    growing.manage_workers()
    assert [p.slot for p in active(growing)] == [0, 1]
    for expected in (4, 8, 8):
        active(growing)[0].blocked = True  # a worker said its jobs wait or run long; none is idle
        growing.size_pool()
        growing.manage_workers()
        assert len(active(growing)) == expected
    growing.size_pool()  # nobody said it again: it stays
    growing.manage_workers()
    assert len(active(growing)) == 8 and not any(p.blocked for p in growing.workers.values())


def test_workers_that_block_grow_nothing_while_another_waits_idle(growing, system):
    growing.manage_workers()
    first, second = active(growing)
    growing.idle_board.mark(second.slot, True)  # it waits for work: it can take the next job
    first.blocked = True
    growing.size_pool()
    growing.manage_workers()
    assert len(active(growing)) == 2


def test_a_worker_beyond_the_least_idle_for_a_minute_is_retired_and_those_within_it_are_kept(growing, system):
    growing.manage_workers()
    active(growing)[0].blocked = True
    growing.size_pool()
    growing.manage_workers()
    workers = active(growing)
    assert len(workers) == 4
    for proc in workers:
        growing.idle_board.mark(proc.slot, True)
    growing.size_pool()  # seen idle from now on
    assert system.sent == []
    for proc in workers:
        proc.idle_since -= IDLE_RETIRE
    for expected in (3, 2, 2):
        growing.size_pool()  # one a look: the highest slot first
        growing.manage_workers()
        assert [p.slot for p in active(growing)] == [0, 1, 2, 3][:expected]
    assert [signum for _, signum in system.sent] == [signal.SIGTERM, signal.SIGTERM]
    assert growing.pool.now == 2


def test_ttin_and_ttou_change_a_growing_pool_now_and_at_most(growing, system):
    growing.manage_workers()
    growing.dispatch(signal.SIGTTIN)
    growing.manage_workers()
    assert len(active(growing)) == 3 and growing.pool.most == 9
    growing.dispatch(signal.SIGTTOU)
    growing.dispatch(signal.SIGTTOU)
    growing.manage_workers()
    assert len(active(growing)) == 1 and growing.pool.most == 7


def test_a_worker_waiting_for_a_turn_at_the_cores_is_not_idle_for_growth_but_spare_for_the_pool(growing, system):
    growing.manage_workers()
    first, second = active(growing)
    growing.idle_board.waiting(second.slot)  # others run short jobs: it waits for a token
    first.blocked = True
    growing.size_pool()  # it cannot take a job that waits meanwhile: the pool grows
    growing.manage_workers()
    assert len(active(growing)) == 4
    for proc in active(growing)[2:]:
        growing.idle_board.waiting(proc.slot)
    growing.size_pool()
    for proc in active(growing):
        if proc.idle_since is not None:
            proc.idle_since -= IDLE_RETIRE
    growing.size_pool()
    growing.manage_workers()
    assert [p.slot for p in active(growing)] == [0, 1, 2]  # the highest spare one goes first


def test_a_grown_pool_shrinks_back_one_a_look_once_no_job_has_waited_or_run_long_for_a_minute(growing, system):
    growing.manage_workers()
    active(growing)[0].blocked = True
    growing.size_pool()
    growing.manage_workers()
    assert len(active(growing)) == 4
    growing.size_pool()  # every worker busy (short jobs), a report a moment ago: kept
    assert len(active(growing)) == 4
    growing.pool.reported_at -= IDLE_RETIRE
    for expected in ([0, 1, 2], [0, 1], [0, 1]):
        growing.size_pool()
        growing.manage_workers()
        assert [p.slot for p in active(growing)] == expected  # busy ones too, the highest first; never below 2
