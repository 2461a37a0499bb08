"""The supervisor's children as it sees them, and the system calls that make and end
them (:class:`System`, which the supervisor's in-process tests replace)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NoReturn

from jobq.daemon import reports

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


def become_child(body: Callable[[], int], *, signals: Iterable[int], inherited_fds: Iterable[int]) -> NoReturn:
    """In a forked child: a process group of its own (killing it kills what its handlers
    started), the default handlers of ``signals``, none of the supervisor's pipes; run
    ``body`` and exit with its code without running the parent's exit handlers."""
    code = 1
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        for signum in signals:
            signal.signal(signum, signal.SIG_DFL)
        for fd in inherited_fds:
            os.close(fd)
        code = body()
    except BaseException:
        log.exception("child.failed pid=%s", os.getpid())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class CrashLoop:
    """Workers that die soon after their spawn double the wait before the next spawn
    (one at a time): a crash loop backs off, and says so; it never spins."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.respawn_after = 0.0

    def crashed(self, spawned: float) -> None:
        """A worker spawned at ``spawned`` (monotonic) died on its own."""
        if time.monotonic() - spawned < CRASH_WINDOW:
            self.delay = min(max(self.delay * 2, 0.5), CRASH_BACKOFF_MAX)
            self.respawn_after = time.monotonic() + self.delay
            log.warning("supervisor.crash_loop respawn_in=%.1fs", self.delay)
        else:
            self.delay = 0.0

    def spawns_allowed(self, missing: int) -> int:
        """How many of ``missing`` workers may be spawned now."""
        if missing <= 0 or time.monotonic() < self.respawn_after:
            return 0
        return missing if self.delay == 0 else 1


@dataclass
class WorkerProcess:
    """A worker process, as its reports describe it."""

    pid: int
    worker_id: str
    reader: reports.Reader
    spawned: float
    slot: int  # its byte on the idle board
    current: reports.Started | None = None
    boot_error: str | None = None
    retiring: bool = False  # asked to stop (TERM sent)
    retire_deadline: float | None = None
    kill_kind: str | None = None  # why we SIGKILLed it: "timeout" or "shutdown"

    def read_reports(self) -> None:
        """Take in what the worker reported since the last read."""
        messages, _ = self.reader.read()
        for message in messages:
            if isinstance(message, reports.Started):
                self.current = message
            elif isinstance(message, reports.Idle):
                self.current = None
            elif isinstance(message, reports.BootError):
                self.boot_error = message.reason


@dataclass
class MaintenanceProcess:
    """The maintenance process, and the pipe the supervisor tells it about gone workers on."""

    pid: int
    fd: int

    def tell(self, message: reports.Gone) -> None:
        try:
            os.write(self.fd, reports.encode(message))
        except OSError as exc:
            log.warning("supervisor.unrecovered worker=%s: %s", message.worker_id, exc)

    def close(self) -> None:
        """It exited: close our end of its pipe."""
        os.close(self.fd)

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
