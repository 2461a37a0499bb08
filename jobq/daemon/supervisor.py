"""``jobq worker``: the supervisor, modelled on Gunicorn's arbiter.

One class, one loop, a few verbs: spawn (fork a worker), reap (collect the dead),
murder (kill the ones past their job's deadline), manage (hold the count), stop
(graceful or not), halt (give up). Signal handlers only record the signal; the loop
dispatches to ``handle_<name>``. The supervisor holds no database connection, so a
database outage can never wedge its signal handling or its reaping; the one child
that talks to the database on its behalf is the maintenance process, which settles
the jobs of the workers that died or were killed.

Signals: TERM, INT graceful stop; QUIT immediate stop; HUP replace every worker
gracefully (they import the handler modules afresh); TTIN one worker more, TTOU one
fewer.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass

from jobq.daemon import reports
from jobq.daemon.idle import IdleBoard
from jobq.daemon.maintenance import STOP_PATIENCE, Maintenance
from jobq.settings import Settings
from jobq.daemon.worker import EXIT_BOOT_ERROR, EXIT_OK, Worker, worker_name

log = logging.getLogger(__name__)

EXIT_HALTED = EXIT_BOOT_ERROR  # the supervisor gives up: a worker cannot boot
TICK = 0.1  # seconds between two passes of the loop when nothing happens
CRASH_WINDOW = 5.0  # a worker that dies sooner than this after its spawn counts towards a crash loop
CRASH_BACKOFF_MAX = 30.0

SIGNALS = ("HUP", "QUIT", "INT", "TERM", "TTIN", "TTOU", "CHLD")


class Halt(Exception):
    def __init__(self, reason: str, code: int = EXIT_HALTED) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass
class WorkerProcess:
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


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.num_workers = settings.concurrency
        self.hostname = socket.gethostname()
        self.workers: dict[int, WorkerProcess] = {}
        self.maintenance_pid: int | None = None
        self.maintenance_fd: int | None = None
        self.signals: list[int] = []
        self.stopping = False
        self.crash_delay = 0.0
        self.respawn_after = 0.0
        self.idle_board = IdleBoard()  # shared with every worker forked from here

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until stopped; return the exit code."""
        self.install_signals()
        log.info(
            "supervisor.started pid=%s workers=%s queues=%s",
            os.getpid(), self.num_workers, ",".join(self.settings.queues),
        )
        try:
            self.spawn_maintenance()
            self.manage_workers()
            while True:
                self.sleep(TICK)
                self.read_reports()
                while self.signals:
                    signum = self.signals.pop(0)
                    name = signal.Signals(signum).name[3:].lower()
                    code = getattr(self, f"handle_{name}")()
                    if code is not None:
                        return code
                self.reap_workers()
                self.murder_workers()
                self.manage_workers()
                self.manage_maintenance()
        except Halt as halt:
            log.error("supervisor.halted reason=%s", halt.reason)
            self.stop(graceful=False)
            print(f"jobq: {halt.reason}", file=sys.stderr, flush=True)
            return halt.code

    def install_signals(self) -> None:
        self.signal_r, signal_w = os.pipe()
        os.set_blocking(self.signal_r, False)
        os.set_blocking(signal_w, False)
        signal.set_wakeup_fd(signal_w)
        for name in SIGNALS:
            signal.signal(getattr(signal, f"SIG{name}"), self.record_signal)

    def record_signal(self, signum: int, frame: object) -> None:
        if len(self.signals) < 10:
            self.signals.append(signum)

    def sleep(self, timeout: float) -> None:
        ready, _, _ = select.select([self.signal_r], [], [], timeout)
        if ready:
            try:
                while os.read(self.signal_r, 4096):
                    pass
            except BlockingIOError:
                pass

    # -- signals -----------------------------------------------------------------------

    def handle_chld(self) -> None:
        self.reap_workers()

    def handle_term(self) -> int:
        log.info("supervisor.stopping graceful=true signal=TERM")
        self.stop(graceful=True)
        return EXIT_OK

    def handle_int(self) -> int:
        log.info("supervisor.stopping graceful=true signal=INT")
        self.stop(graceful=True)
        return EXIT_OK

    def handle_quit(self) -> int:
        log.info("supervisor.stopping graceful=false signal=QUIT")
        self.stop(graceful=False)
        return EXIT_OK

    def handle_hup(self) -> None:
        log.info("supervisor.reloading: replacing %s workers", len(self.workers))
        for proc in list(self.workers.values()):
            self.retire(proc)
        self.manage_workers()

    def handle_ttin(self) -> None:
        self.num_workers += 1
        log.info("supervisor.workers_changed workers=%s", self.num_workers)

    def handle_ttou(self) -> None:
        if self.num_workers > 1:
            self.num_workers -= 1
        log.info("supervisor.workers_changed workers=%s", self.num_workers)

    # -- the verbs ---------------------------------------------------------------------

    def spawn_worker(self) -> None:
        token = secrets.token_hex(3)
        read_fd, write_fd = reports.report_pipe()
        slot = self.free_slot()
        self.idle_board.mark(slot, False)
        worker = Worker(self.settings, token, write_fd, self.idle_board, slot)
        pid = _fork()
        if pid == 0:
            os.close(read_fd)
            self.become_child(worker.run)
        os.close(write_fd)
        _set_process_group(pid)
        worker_id = worker_name(self.hostname, pid, token)
        self.workers[pid] = WorkerProcess(pid, worker_id, reports.Reader(read_fd), time.monotonic(), slot)
        log.info("supervisor.spawned worker=%s", worker_id)

    def free_slot(self) -> int:
        """The lowest slot of the idle board no live worker holds."""
        taken = {proc.slot for proc in self.workers.values()}
        return next(slot for slot in range(self.idle_board.slots) if slot not in taken)

    def spawn_maintenance(self) -> None:
        read_fd, write_fd = reports.report_pipe()
        maintenance = Maintenance(self.settings, read_fd)
        pid = _fork()
        if pid == 0:
            os.close(write_fd)
            self.become_child(maintenance.run)
        os.close(read_fd)
        os.set_blocking(write_fd, False)
        _set_process_group(pid)
        self.maintenance_pid, self.maintenance_fd = pid, write_fd

    def become_child(self, body) -> None:  # type: ignore[no-untyped-def]
        """In a forked child: leave the supervisor's signals and pipes behind, run
        ``body``, and exit with its code without running the parent's exit handlers."""
        code = 1
        try:
            os.setpgid(0, 0)  # its own group: killing it kills what its handlers started
            signal.set_wakeup_fd(-1)
            for name in SIGNALS:
                signal.signal(getattr(signal, f"SIG{name}"), signal.SIG_DFL)
            os.close(self.signal_r)
            for proc in self.workers.values():
                os.close(proc.reader.fd)
            if self.maintenance_fd is not None:
                os.close(self.maintenance_fd)
            code = body()
        except BaseException:
            log.exception("child.failed pid=%s", os.getpid())
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def read_reports(self) -> None:
        for proc in self.workers.values():
            self.read_reports_of(proc)

    def read_reports_of(self, proc: WorkerProcess) -> None:
        messages, _ = proc.reader.read()
        for message in messages:
            if isinstance(message, reports.Started):
                proc.current = message
            elif isinstance(message, reports.Idle):
                proc.current = None
            elif isinstance(message, reports.BootError):
                proc.boot_error = message.reason

    def reap_workers(self) -> None:
        """Collect every child that exited; settle the jobs of workers through maintenance."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.maintenance_pid:
                log.warning("supervisor.maintenance_exited status=%s", _describe(status))
                self.maintenance_pid = None
                if self.maintenance_fd is not None:
                    os.close(self.maintenance_fd)
                    self.maintenance_fd = None
                continue
            proc = self.workers.pop(pid, None)
            if proc is not None:
                self.worker_exited(proc, status)

    def worker_exited(self, proc: WorkerProcess, status: int) -> None:
        self.read_reports_of(proc)
        os.close(proc.reader.fd)
        self.idle_board.mark(proc.slot, False)  # a worker that died waiting is not idle
        code = os.waitstatus_to_exitcode(status)
        if code == EXIT_BOOT_ERROR and proc.boot_error is not None and not self.stopping:
            raise Halt(f"worker failed to boot: {proc.boot_error}")
        job = proc.current
        if proc.kill_kind is not None:
            kind = proc.kill_kind
        elif code == EXIT_OK:
            kind = "shutdown"
        else:
            kind = "crash"
        described = _describe(status)
        if kind == "crash":
            log.error(
                "supervisor.worker_died worker=%s %s job=%s",
                proc.worker_id, described, job.job_id if job else "-",
            )
            self.note_crash(proc)
        else:
            log.info("supervisor.worker_exited worker=%s %s kind=%s", proc.worker_id, described, kind)
        self.tell_maintenance(
            reports.Gone(
                proc.worker_id,
                job.job_id if job else 0,
                job.lease if job else 0,
                kind,
                job.timeout if job else 0.0,
                described,
            )
        )

    def note_crash(self, proc: WorkerProcess) -> None:
        """A crash soon after a spawn doubles the wait before the next spawn: a crash
        loop backs off (and says so), it never spins."""
        if time.monotonic() - proc.spawned < CRASH_WINDOW:
            self.crash_delay = min(max(self.crash_delay * 2, 0.5), CRASH_BACKOFF_MAX)
            self.respawn_after = time.monotonic() + self.crash_delay
            log.warning("supervisor.crash_loop respawn_in=%.1fs", self.crash_delay)
        else:
            self.crash_delay = 0.0

    def murder_workers(self) -> None:
        """SIGKILL (with its process group) every worker past its job's deadline, or past
        the graceful timeout after it was asked to stop."""
        now = time.monotonic()
        for proc in list(self.workers.values()):
            if proc.kill_kind is not None:
                continue
            if proc.current is not None and now > proc.current.deadline:
                log.error(
                    "job.timed_out id=%s worker=%s timeout=%ss: killing the worker",
                    proc.current.job_id, proc.worker_id, f"{proc.current.timeout:g}",
                )
                self.kill(proc, "timeout")
            elif proc.retire_deadline is not None and now > proc.retire_deadline:
                log.warning(
                    "supervisor.graceful_timeout worker=%s job=%s: killing it, its job goes back to pending",
                    proc.worker_id, proc.current.job_id if proc.current else "-",
                )
                self.kill(proc, "shutdown")

    def kill(self, proc: WorkerProcess, kind: str) -> None:
        if proc.kill_kind is not None:
            return  # already killed, for its first reason
        proc.kill_kind = kind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def retire(self, proc: WorkerProcess) -> None:
        """Ask a worker to stop after its current job (TERM)."""
        if proc.retiring:
            return
        proc.retiring = True
        proc.retire_deadline = time.monotonic() + self.settings.graceful_timeout
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def manage_workers(self) -> None:
        """Hold the number of (non-retiring) workers at ``num_workers``."""
        if self.stopping:
            return
        active = sorted((p for p in self.workers.values() if not p.retiring), key=lambda p: p.spawned)
        for proc in active[: max(0, len(active) - self.num_workers)]:
            self.retire(proc)
        missing = self.num_workers - len(active)
        if missing > 0 and time.monotonic() >= self.respawn_after:
            for _ in range(missing if self.crash_delay == 0 else 1):
                self.spawn_worker()

    def manage_maintenance(self) -> None:
        if not self.stopping and self.maintenance_pid is None:
            self.spawn_maintenance()

    def tell_maintenance(self, message: reports.Gone) -> None:
        if self.maintenance_fd is None:
            log.warning("supervisor.unsettled worker=%s: no maintenance process; the stale reaper will", message.worker_id)
            return
        try:
            os.write(self.maintenance_fd, reports.encode(message))
        except OSError as exc:
            log.warning("supervisor.unsettled worker=%s: %s", message.worker_id, exc)

    def stop(self, *, graceful: bool) -> None:
        """Stop every worker (gracefully: let running jobs finish within
        JOBQ_GRACEFUL_TIMEOUT, then kill), then the maintenance process."""
        self.stopping = True
        for proc in list(self.workers.values()):
            if graceful:
                self.retire(proc)
            else:
                self.kill(proc, "shutdown")
        while self.workers:
            self.sleep(TICK)
            self.read_reports()
            for signum in self.signals:
                if signum == signal.SIGQUIT and graceful:
                    log.info("supervisor.stopping graceful=false signal=QUIT")
                    graceful = False
                    for proc in list(self.workers.values()):
                        self.kill(proc, "shutdown")
                elif signum in (signal.SIGTERM, signal.SIGINT):
                    log.info("supervisor.already_stopping: still graceful")
            self.signals.clear()
            self.reap_workers()
            self.murder_workers()
        self.stop_maintenance()
        log.info("supervisor.exited")

    def stop_maintenance(self) -> None:
        pid = self.maintenance_pid
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_PATIENCE + 1
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
            time.sleep(0.05)
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _fork() -> int:
    # Flush first, or the child inherits (and later writes out again) what is buffered.
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fork()


def _set_process_group(pid: int) -> None:
    try:
        os.setpgid(pid, pid)
    except (PermissionError, ProcessLookupError):
        pass  # the child set it itself first, or is already gone


def _describe(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exit code {code}"
