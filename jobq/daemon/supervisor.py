"""``jobq worker``: the supervisor, modelled on Gunicorn's arbiter.

One class, one loop, a few verbs: spawn (fork a worker), reap (collect the dead),
murder (kill the ones past their job's deadline), manage (hold the count), stop
(graceful or not), halt (give up). Signal handlers only record the signal; the loop
dispatches it (TERM, INT and QUIT stop; the others go to ``handle_<name>``). The
supervisor holds no database connection, so a database outage can never wedge its
signal handling or its reaping; the one child that talks to the database on its
behalf is the maintenance process, which recovers the jobs of the workers that died
or were killed.

Signals: TERM, INT graceful stop; QUIT immediate stop; HUP replace every worker
gracefully (they import the handler modules afresh); TTIN one worker more, TTOU one
fewer.

The pool holds ``JOBQ_MIN_WORKERS`` workers and grows up to the concurrency while its
workers' jobs wait or run long (:mod:`jobq.daemon.pool`).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable

from jobq.daemon import messages, presence
from jobq.daemon.boards.cores import CoreTokens
from jobq.daemon.boards.finished import FinishedArea
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.maintenance.duties import STOP_PATIENCE, Maintenance
from jobq.daemon.pool import IDLE_RETIRE, PoolSize
from jobq.daemon.processes import CancelRequest, MaintenanceProcess, Respawns, System, WorkerProcess, become_child
from jobq.daemon.wakeup import SelfPipe
from jobq.daemon.exits import EXIT_BOOT_ERROR, EXIT_OK
from jobq.daemon.worker.loop import WorkerLoop
from jobq.settings import Settings
from jobq.store import migrate

log = logging.getLogger(__name__)

EXIT_HALTED = EXIT_BOOT_ERROR  # the supervisor gives up: a worker cannot boot
TICK = 0.1  # seconds between two passes of the loop when nothing happens

SIGNALS = tuple(getattr(signal, f"SIG{name}") for name in ("HUP", "QUIT", "INT", "TERM", "TTIN", "TTOU", "CHLD"))


class Halt(Exception):
    def __init__(self, reason: str, code: int = EXIT_HALTED) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class Supervisor:
    def __init__(self, settings: Settings, system: System | None = None) -> None:
        self.settings = settings
        self.system = system or System()
        self.pool = PoolSize(settings.min_workers, settings.concurrency, time.monotonic())
        self.workers: dict[int, WorkerProcess] = {}
        self.maintenance: MaintenanceProcess | None = None
        self.signals: list[int] = []
        self.wakeup: SelfPipe | None = None
        self.stopping = False
        self.respawns = Respawns()
        # A maintenance process that keeps dying at start backs off the same way (slot 0).
        self.maintenance_respawns = Respawns("maintenance")
        self.idle_board = IdleBoard()  # shared with every worker forked from here
        self.job_board = JobBoard()  # what each worker runs: written by it, read here
        self.cores = CoreTokens(settings.short_job_workers)  # turns at the cores for batches of short jobs

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until stopped; return the exit code."""
        self.install_signals()
        log.info("supervisor.started pid=%s workers=%s most=%s queues=%s",
                 os.getpid(), self.pool.now, self.pool.most, "(all)" if self.settings.all_queues else ",".join(self.settings.queues))
        migrate.available()  # read here once, for every child's schema check
        try:
            self.spawn_maintenance()
            self.manage_workers()
            while True:
                self.sleep(TICK)
                self.read_reports()
                while self.signals:
                    signum = self.signals.pop(0)
                    code = self.dispatch(signum)
                    if code is not None:
                        return code
                self.reap_workers()
                self.murder_workers()
                self.size_pool()
                self.manage_workers()
                self.manage_maintenance()
        except Halt as halt:
            log.error("supervisor.halted reason=%s", halt.reason)
            self.stop(graceful=False)
            print(f"jobq: {halt.reason}", file=sys.stderr, flush=True)
            return halt.code

    def install_signals(self) -> None:
        self.wakeup = SelfPipe.for_signals({signum: self.record_signal for signum in SIGNALS})

    def record_signal(self, signum: int, frame: object) -> None:
        if len(self.signals) < 10:
            self.signals.append(signum)

    def sleep(self, timeout: float) -> None:
        """Until a signal, a message of the maintenance process, or the timeout."""
        fds = [self.maintenance.control.fd] if self.maintenance is not None else []
        self.wakeup.wait(timeout, fds)  # type: ignore[union-attr]  # install_signals first

    # -- signals -----------------------------------------------------------------------

    def dispatch(self, signum: int) -> int | None:
        """Run the handler of a recorded signal; an exit code means stop."""
        name = signal.Signals(signum).name[3:]
        if name in ("TERM", "INT", "QUIT"):  # INT is TERM's twin; QUIT does not wait
            log.info("supervisor.stopping graceful=%s signal=%s", str(name != "QUIT").lower(), name)
            self.stop(graceful=name != "QUIT")
            return EXIT_OK
        return getattr(self, f"handle_{name.lower()}")()

    def handle_chld(self) -> None:
        self.reap_workers()

    def handle_hup(self) -> None:
        log.info("supervisor.reloading: replacing %s workers", len(self.workers))
        for proc in list(self.workers.values()):
            self.retire(proc)
        self.manage_workers()

    def handle_ttin(self) -> None:
        self.pool.one_more()
        log.info("supervisor.workers_changed workers=%s most=%s", self.pool.now, self.pool.most)

    def handle_ttou(self) -> None:
        self.pool.one_fewer()
        log.info("supervisor.workers_changed workers=%s most=%s", self.pool.now, self.pool.most)

    # -- the verbs ---------------------------------------------------------------------

    def spawn_worker(self, slot: int) -> None:
        token = secrets.token_hex(3)
        (read_fd, write_fd), (control_read, control_write) = messages.report_pipe(), messages.control_pipe()
        self.idle_board.mark(slot, False)
        self.job_board.show(slot, None)  # its predecessor's last job is not its own
        finished = FinishedArea()  # what it finished and has not written yet
        worker = WorkerLoop(self.settings, token, write_fd, self.idle_board, slot,
                        control_fd=control_read, jobs=self.job_board, finished=finished, cores=self.cores)
        pid = self.fork(worker.run, ours=(read_fd, control_write), theirs=(write_fd, control_read), die_with=os.getpid())
        worker_id = presence.worker_name(self.settings.hostname, pid, token)
        self.workers[pid] = WorkerProcess(pid, worker_id, messages.Reader(read_fd), time.monotonic(), slot,
                                          self.job_board, finished, control_fd=control_write)
        log.info("supervisor.spawned worker=%s", worker_id)
        self.tell_maintenance(messages.Spawned(worker_id))

    def free_slots(self, n: int) -> list[int]:
        """The ``n`` lowest slots of the idle board that no live worker holds and whose
        respawn wait is over."""
        taken = {proc.slot for proc in self.workers.values()} | self.respawns.waiting()
        return [slot for slot in range(self.idle_board.slots) if slot not in taken][:n]

    def spawn_maintenance(self) -> None:
        (read_fd, write_fd), (control_read, control_write) = messages.report_pipe(), messages.control_pipe()
        maintenance = Maintenance(self.settings, read_fd, control_write)
        pid = self.fork(maintenance.run, ours=(write_fd, control_read), theirs=(read_fd, control_write))
        os.set_blocking(write_fd, False)
        self.maintenance = MaintenanceProcess(pid, write_fd, messages.Reader(control_read), time.monotonic())
        for proc in self.workers.values():
            self.maintenance.tell(messages.Spawned(proc.worker_id))

    def fork(self, body: Callable[[], int], *, ours: tuple[int, ...], theirs: tuple[int, ...],
             die_with: int | None = None) -> int:
        """A child, in a process group of its own, running ``body`` with the pipe ends
        ``theirs`` (closed here) and without ``ours`` (closed there): its pid."""
        pid = self.system.fork()
        if pid == 0:
            for fd in ours:
                os.close(fd)
            become_child(body, signals=SIGNALS, inherited_fds=self.inherited_fds(), die_with=die_with)
        for fd in theirs:
            os.close(fd)
        self.system.set_process_group(pid)
        return pid

    def inherited_fds(self) -> list[int]:
        """The supervisor's pipe ends that a forked child must close."""
        fds = [fd for proc in self.workers.values() for fd in (proc.reader.fd, proc.control_fd)]
        if self.wakeup is not None:
            fds += [self.wakeup.read_fd, self.wakeup.write_fd]
        if self.maintenance is not None:
            fds += [self.maintenance.fd, self.maintenance.control.fd]
        return fds

    def read_reports(self) -> None:
        for proc in self.workers.values():
            proc.read_reports()
        if self.maintenance is not None:
            for message in self.maintenance.control_messages():
                self.pass_on(message)

    def pass_on(self, message: messages.Cancel | messages.Pause) -> None:
        """An operator cancelled a job or paused a queue: tell every worker that has
        jobs in flight (it drops what it has not started); the one running a cancelled
        job gets JOBQ_CANCEL_GRACE seconds to end it before it is killed."""
        for proc in self.workers.values():
            told = proc.tell(message, self.system)
            current = proc.running_job()
            if told and isinstance(message, messages.Cancel) and current and current.job_id == message.job_id:
                proc.cancelling = CancelRequest(message.job_id, time.monotonic() + self.settings.cancel_grace)
                log.info("job.cancel_requested id=%s worker=%s", message.job_id, proc.worker_id)

    def reap_workers(self) -> None:
        """Collect every child that exited; the jobs of workers go to maintenance to recover."""
        while True:
            try:
                pid, status = self.system.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.maintenance is not None and pid == self.maintenance.pid:
                self.maintenance_exited(self.maintenance, status)
                continue
            proc = self.workers.pop(pid, None)
            if proc is not None:
                self.worker_exited(proc, status)

    def maintenance_exited(self, proc: MaintenanceProcess, status: int) -> None:
        """Respawned after a wait that doubles while it keeps dying soon after its start;
        one that could not start for a configuration reason halts the supervisor."""
        log.warning("supervisor.maintenance_exited status=%s", messages.describe_exit(status))
        proc.close()
        self.maintenance = None
        if os.waitstatus_to_exitcode(status) == EXIT_BOOT_ERROR and not self.stopping:
            raise Halt("the maintenance process failed to start (its log line above says why)")
        if not self.stopping:
            self.maintenance_respawns.died(0, spawned=proc.spawned, running_job=False)

    def worker_exited(self, proc: WorkerProcess, status: int) -> None:
        proc.read_reports()
        os.close(proc.reader.fd)
        os.close(proc.control_fd)
        self.idle_board.mark(proc.slot, False)  # a worker that died waiting is not idle
        if os.waitstatus_to_exitcode(status) == EXIT_BOOT_ERROR and proc.boot_error is not None and not self.stopping:
            raise Halt(f"worker failed to boot: {proc.boot_error}")
        gone, unasked = proc.exit_report(status)
        proc.finished.close()
        if unasked:
            log.error("supervisor.worker_died worker=%s %s job=%s", proc.worker_id, gone.detail, gone.job_id or "-")
            running_job = gone.kind == "crash" and gone.job_id != 0
            self.respawns.died(proc.slot, spawned=proc.spawned, running_job=running_job)
        else:
            log.info("supervisor.worker_exited worker=%s %s kind=%s", proc.worker_id, gone.detail, gone.kind)
        self.tell_maintenance(gone)

    def murder_workers(self) -> None:
        """SIGKILL (with its process group) every worker past its job's deadline, or past
        the graceful timeout after it was asked to stop."""
        now = time.monotonic()
        for proc in list(self.workers.values()):
            if proc.kill_kind is not None:
                continue
            current = proc.running_job()  # once: the worker moves on meanwhile
            if current is not None and now > current.deadline:
                log.error("job.timed_out id=%s worker=%s timeout=%ss: killing the worker",
                          current.job_id, proc.worker_id, f"{current.timeout:g}")
                self.kill(proc, "timeout")
            elif proc.cancel_overdue(now):
                log.warning("job.cancel_killed id=%s worker=%s grace=%ss: its handler did not return; killing the worker",
                            proc.cancelling.job_id if proc.cancelling else "-", proc.worker_id, f"{self.settings.cancel_grace:g}")
                self.kill(proc, "cancel")
            elif proc.retire_deadline is not None and now > proc.retire_deadline:
                log.warning("supervisor.graceful_timeout worker=%s job=%s: killing it, its job goes back to pending",
                            proc.worker_id, current.job_id if current else "-")
                self.kill(proc, "shutdown")

    def kill(self, proc: WorkerProcess, kind: str) -> None:
        if proc.kill_kind is not None:
            return  # already killed, for its first reason
        proc.kill_kind = kind
        self.system.kill(proc.pid, signal.SIGKILL, group=True)

    def retire(self, proc: WorkerProcess) -> None:
        """Ask a worker to stop after its current job (TERM)."""
        if proc.retiring:
            return
        proc.retiring = True
        proc.retire_deadline = time.monotonic() + self.settings.graceful_timeout
        self.system.kill(proc.pid, signal.SIGTERM)

    def size_pool(self) -> None:
        """Grow the pool when a worker reported jobs that wait or run long and none of
        the others waits idle; retire one worker beyond the least when one has waited
        idle, or for a turn at the cores, IDLE_RETIRE seconds, or when no job has waited
        or run long for that long (:mod:`jobq.daemon.pool`)."""
        now = time.monotonic()
        active = [p for p in self.workers.values() if not p.retiring]
        for proc in active:
            proc.idle_since = (proc.idle_since or now) if self.idle_board.spare(proc.slot) else None
        if any(proc.blocked for proc in self.workers.values()):
            for proc in self.workers.values():
                proc.blocked = False
            if self.pool.reported(now, none_idle=not any(self.idle_board.idle(proc.slot) for proc in active)):
                log.info("supervisor.pool_grown workers=%s most=%s: every worker is busy and jobs wait or run long",
                         self.pool.now, self.pool.most)
                return
        spare = [p for p in active if p.idle_since is not None and now - p.idle_since >= IDLE_RETIRE]
        if (spare or self.pool.quiet(now)) and len(active) == self.pool.now and self.pool.shrink():
            proc = max(spare or active, key=lambda p: p.slot)
            why = "idle or waiting for a turn" if spare else "no job waited or ran long"
            log.info("supervisor.pool_shrunk workers=%s most=%s: worker %s retired, %s for %ss",
                     self.pool.now, self.pool.most, proc.worker_id, why, f"{IDLE_RETIRE:g}")
            self.retire(proc)

    def manage_workers(self) -> None:
        """Hold the number of (non-retiring) workers at the pool's size, less the slots
        waiting out a crash loop."""
        if self.stopping:
            return
        active = sorted((p for p in self.workers.values() if not p.retiring), key=lambda p: p.spawned)
        for proc in active[: max(0, len(active) - self.pool.now)]:
            self.retire(proc)
        missing = self.pool.now - len(active) - len(self.respawns.waiting())
        for slot in self.free_slots(max(0, missing)):
            self.spawn_worker(slot)

    def manage_maintenance(self) -> None:
        if not self.stopping and self.maintenance is None and not self.maintenance_respawns.waiting():
            self.spawn_maintenance()

    def tell_maintenance(self, message: messages.Spawned | messages.Gone) -> None:
        if self.maintenance is None:  # one spawned again is told of every live worker
            if isinstance(message, messages.Gone):
                log.warning("supervisor.unrecovered worker=%s: no maintenance process; the stale reaper will",
                            message.worker_id)
            return
        self.maintenance.tell(message)

    def stop(self, *, graceful: bool) -> None:
        """Stop every worker (gracefully: let running jobs finish within
        JOBQ_GRACEFUL_TIMEOUT, then kill), then the maintenance process."""
        self.stopping = True
        running = [job for proc in self.workers.values() if (job := proc.running_job()) is not None]
        if graceful and running:
            log.info("supervisor.draining jobs=%s: waiting up to %s s for %s running jobs; any still running then "
                     "is killed and goes back to pending", ",".join(str(job.job_id) for job in running),
                     f"{self.settings.graceful_timeout:g}", len(running))
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
        if self.maintenance is not None:
            self.maintenance.stop(self.system, STOP_PATIENCE + 1)
        log.info("supervisor.exited")
