"""The supervisor's children as it sees them, and the system calls that make and end
them (:class:`System`, which the supervisor's in-process tests replace)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NoReturn

from jobq.daemon import messages
from jobq.observe import tracing
from jobq.daemon.boards.finished import FinishedArea
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.wakeup import reset_signals
from jobq.daemon.exits import EXIT_DATABASE_ERROR, EXIT_OK

log = logging.getLogger(__name__)

POLL = 0.05  # seconds between two looks at a child asked to exit
CRASH_WINDOW = 5.0  # a worker that dies sooner than this after its spawn counts towards a crash loop
CRASH_BACKOFF_MAX = 30.0


class System:
    """The process calls the supervisor makes. Its in-process tests replace them, to
    check its decisions (spawn, reap, murder, manage) without forking."""

    def fork(self) -> int:
        # Flush first, or the child inherits (and later writes out again) what is buffered.
        sys.stdout.flush()
        sys.stderr.flush()
        return os.fork()

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        return os.waitpid(pid, options)

    def set_process_group(self, pid: int) -> None:
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass  # the child set it itself first, or is already gone

    def kill(self, pid: int, signum: int, *, group: bool = False) -> None:
        try:
            (os.killpg if group else os.kill)(pid, signum)
        except ProcessLookupError:
            pass


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def become_child(
    body: Callable[[], int], *, signals: Iterable[int], inherited_fds: Iterable[int], die_with: int | None = None
) -> NoReturn:
    """In a forked child: a process group of its own (killing it kills what its handlers
    started), the default handlers of ``signals``, none of the supervisor's pipes; run
    ``body`` and exit with its code without running the parent's exit handlers. With
    ``die_with`` (the parent's pid), the child is killed as soon as that parent dies."""
    code = 1
    try:
        if die_with is not None:
            die_with_parent(die_with)
        os.setpgid(0, 0)
        reset_signals(signals)
        for fd in inherited_fds:
            os.close(fd)
        code = body()
    except BaseException:
        log.exception("child.failed pid=%s", os.getpid())
    finally:
        with contextlib.suppress(Exception):
            tracing.flush()  # spans the child's exporter holds: os._exit runs no exit handler
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux's
    PR_SET_PDEATHSIG): a worker whose supervisor is gone must not run its job past the
    timeout the supervisor enforced. Its session closes with it, and the stale reaper
    takes the job back with an attempt, as for a lost host. Elsewhere (no prctl), the
    worker's own parent check is the fallback."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


class Respawns:
    """When each slot of the pool may have a worker again.

    A worker that dies without a job soon after its spawn (it could not boot, or died
    idle) doubles the wait before its slot is filled again: a crash loop backs off, and
    says so; it never spins. The wait is per slot, never the whole pool. A worker that
    dies while running a job is replaced at once: the job is charged an attempt (and
    goes dead after its retries), not the pool.
    """

    def __init__(self, process: str = "worker") -> None:
        self.process = process  # what the log line names: "worker" (by slot) or "maintenance"
        self._delay: dict[int, float] = {}
        self._until: dict[int, float] = {}

    def died(self, slot: int, *, spawned: float, running_job: bool) -> None:
        """The worker of ``slot``, spawned at ``spawned`` (monotonic), died on its own."""
        now = time.monotonic()
        if running_job or now - spawned >= CRASH_WINDOW:
            self._delay.pop(slot, None)
            self._until.pop(slot, None)
            return
        delay = min(max(self._delay.get(slot, 0.0) * 2, 0.5), CRASH_BACKOFF_MAX)
        self._delay[slot], self._until[slot] = delay, now + delay
        log.warning("supervisor.crash_loop process=%s slot=%s respawn_in=%.1fs", self.process, slot, delay)

    def waiting(self) -> set[int]:
        """The slots whose wait is not over."""
        now = time.monotonic()
        return {slot for slot, until in self._until.items() if until > now}


@dataclass(frozen=True)
class CancelRequest:
    """The running job was cancelled: the worker is killed at ``deadline`` (monotonic)
    if it is still running it then."""

    job_id: int
    deadline: float


@dataclass
class WorkerProcess:
    """A worker process, as its reports and its record on the job board describe it."""

    pid: int
    worker_id: str
    reader: messages.Reader
    spawned: float
    slot: int  # its byte on the idle board, its record on the job board
    jobs: JobBoard  # what it runs: :meth:`running_job`
    finished: FinishedArea  # what it finished and has not written yet: read once it is dead
    control_fd: int = -1  # the write end of its control pipe (cancels, pauses)
    boot_error: str | None = None
    retiring: bool = False  # asked to stop (TERM sent)
    retire_deadline: float | None = None
    kill_kind: str | None = None  # why we SIGKILLed it: "timeout", "cancel" or "shutdown"
    cancelling: CancelRequest | None = None
    blocked: bool = False  # it reported jobs that wait or run long since the supervisor last looked
    idle_since: float | None = None  # when the supervisor first saw it idle in a row (monotonic)

    def running_job(self) -> messages.Started | None:
        """The job it runs now (its deadline, its timeout), as it last showed it: read
        from the board at each call (the worker moves on meanwhile), so a caller reads it
        once and works on that."""
        return self.jobs.running(self.slot)

    def show(self, started: messages.Started | None) -> None:
        """Put ``started`` on its record, as the worker does (for a slot without a live
        worker, and for tests)."""
        self.jobs.show(self.slot, started)

    def tell(self, message: messages.Cancel | messages.Pause, system: System) -> bool:
        """Pass a cancel or a pause on to the worker (its control pipe, then SIGUSR1 to
        have it read). Only a worker that has reported a job (its handler for the signal
        is installed by then) and is not being killed is told; True if it was."""
        if self.running_job() is None or self.kill_kind is not None:
            return False
        if not messages.write(self.control_fd, message):
            log.warning("supervisor.control_dropped worker=%s: its control pipe is full", self.worker_id)
            return False
        system.kill(self.pid, signal.SIGUSR1)
        return True

    def cancel_overdue(self, now: float) -> bool:
        """Whether it still runs a job cancelled longer ago than the grace allows (a
        cancelled run that ended on its own is forgotten)."""
        request = self.cancelling
        if request is None:
            return False
        current = self.running_job()
        if current is None or current.job_id != request.job_id:
            self.cancelling = None
            return False
        return now > request.deadline

    def exit_report(self, status: int) -> tuple[messages.Gone, bool]:
        """What maintenance is told of its exit (wait ``status``), and whether it died
        unasked: a crash, or a database error it left on. One that left on a database
        error ran no job into its death: what it held goes back as at a shutdown."""
        code = os.waitstatus_to_exitcode(status)
        kind = self.kill_kind or ("shutdown" if code in (EXIT_OK, EXIT_DATABASE_ERROR) else "crash")
        unasked = self.kill_kind is None and code != EXIT_OK
        gone = messages.Gone.of(self.worker_id, self.running_job(), kind, status, self.finished.take())
        return gone, unasked

    def read_reports(self) -> None:
        """Take in what the worker reported since the last read."""
        arrived, _ = self.reader.read()
        for message in arrived:
            if isinstance(message, messages.BootError):
                self.boot_error = message.reason
            elif isinstance(message, messages.Blocked):
                self.blocked = True


@dataclass
class MaintenanceProcess:
    """The maintenance process, the pipe the supervisor tells it about its workers on,
    and the one it passes operators' cancels and pauses back on."""

    pid: int
    fd: int
    control: messages.Reader
    spawned: float = 0.0  # time.monotonic() at the fork

    def tell(self, message: messages.Spawned | messages.Gone) -> None:
        try:
            os.write(self.fd, messages.encode(message))
        except OSError as exc:
            log.warning("supervisor.unrecovered worker=%s: %s", message.worker_id, exc)

    def control_messages(self) -> list[messages.Cancel | messages.Pause]:
        arrived, _ = self.control.read()
        return [m for m in arrived if isinstance(m, (messages.Cancel, messages.Pause))]

    def close(self) -> None:
        """It exited: close our ends of its pipes."""
        os.close(self.fd)
        os.close(self.control.fd)

    def stop(self, system: System, patience: float) -> None:
        """TERM, then KILL (with its process group) if it has not exited after ``patience``."""
        system.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            done, _ = system.waitpid(self.pid, os.WNOHANG)
            if done:
                return
            time.sleep(POLL)
        system.kill(self.pid, signal.SIGKILL, group=True)
        system.waitpid(self.pid, 0)
