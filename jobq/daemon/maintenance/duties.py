"""The maintenance process: one child of each supervisor.

Host-local work, always: recover the jobs of this supervisor's workers that died or
were killed (the supervisor sends a ``Gone`` report over a pipe), as soon as their
locks are free; and pass on operators' cancels and pauses (LISTEN on the
``jobq_control`` channel) to the supervisor, which tells its workers; after each
connect of the listener (the first too: the workers start beside it), also the
cancels of this host's jobs made while it was not listening.

Cluster-wide work, only while it holds the leader lock (several hosts may run
``jobq worker`` against one database; one of them leads), each a :class:`Duty` on
its own interval: the samples of the counters that trailing-window metrics are
computed from (kept for JOBQ_SAMPLE_RETENTION), the partitions of finished jobs made
ahead of time (:mod:`jobq.store.partitions`), the stale reaper, the removal of dead workers'
rows, retention (JOBQ_RETENTION; JOBQ_DEAD_LETTER_RETENTION), carrying on the bulk
operations whose runner went away (:func:`jobq.jobs.operations.resume_stalled`), the audit
trail's retention (JOBQ_AUDIT_RETENTION), and the per-minute rollup of the
dashboard's charts (:func:`jobq.observe.rollup.take`) and its retention
(JOBQ_ROLLUP_RETENTION), and the planner's statistics of jobs_live when they are far
short of it (:mod:`jobq.store.statistics`). Each duty's ``run_once`` returns how many rows it changed and logs only when it changed
something.

The leader also fires periodic jobs, on their slots rather than on an interval
(:mod:`jobq.daemon.maintenance.schedule_clock`), woken by a ``schedules`` notification on
``jobq_control``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import psycopg

from jobq.store.sql.database import CONTROL_CHANNEL_GET, LEADER_TRY_LOCK
from jobq.jobs import audit, control
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.store import connections
from jobq.store import locks
from jobq.observe import samples
from jobq.jobs import operations
from jobq.store import partitions
from jobq.store import statistics
from jobq.store import retention
from jobq.observe import rollup
from jobq.daemon import presence
from jobq.daemon.maintenance import reaper
from jobq.daemon import messages
from jobq.daemon.listener import Listener
from jobq.daemon.maintenance.schedule_clock import CONTROL_PAYLOAD as SCHEDULES_CHANGED, ScheduleClock
from jobq.daemon.wakeup import SelfPipe
from jobq.store.connections import Connection
from jobq.daemon.exits import EXIT_BOOT_ERROR
from jobq.errors import ConfigError, DatabaseUnavailable
from jobq.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

RECOVER_RETRY = 0.05  # seconds between two tries at a dead worker's locks
RECOVER_PATIENCE = 30.0  # after this, a dead worker's jobs are left to the stale reaper
STOP_PATIENCE = 5.0  # at shutdown, how long pending recoveries may still take
RETENTION_BUDGET = 1.0  # seconds of deleting per leader pass; the rest waits for the next one
SAMPLE_INTERVAL = 5.0  # seconds between two samples of the totals (trailing-window rates)
ERROR_COUNTER = "maintenance_errors_total"  # counted under queue '' and the duty's name as type
# After the control listener reconnects, the cancels of the time it was away are asked for,
# and of this much before: a notification committed but not yet read when the connection broke.
MISSED_MARGIN = 10.0
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailable)


@dataclass
class Pending:
    """A dead worker whose jobs are not all recovered yet."""

    gone: messages.Gone
    since: float


@dataclass
class Duty:
    """A cluster-wide duty of the leader: ``run_once`` does what is due and returns how
    many rows it changed."""

    name: str
    every: float
    run_once: Callable[[Connection], int]
    next_at: float = 0.0


class Maintenance:
    """Built before the fork; :meth:`run` in the child."""

    def __init__(self, settings: Settings, command_fd: int, control_fd: int) -> None:
        """``command_fd``: the pipe the supervisor's reports arrive on; ``control_fd``: the
        one this process tells the supervisor of cancels and pauses on."""
        self.settings = settings
        self.command_fd = command_fd
        self.control_fd = control_fd
        self.lock_base = locks.key(settings.advisory_namespace, 0)
        self.leader_key = locks.key(settings.advisory_namespace, locks.MAINTENANCE_LEADER)
        self.name = ""  # host:pid, for its sessions' application_name: known in the child (run)
        self.stopping = threading.Event()
        self.pending: list[Pending] = []
        self.live: set[str] = set()  # this supervisor's live workers: the stale reaper spares them
        self.conn: psycopg.Connection | None = None
        self.leader = False
        self.next_lead = 0.0
        self.reconnect = connections.ReconnectDelay()
        self.next_connect = 0.0
        every = settings.reaper_interval
        self.duties = [
            Duty("analyse", SAMPLE_INTERVAL, statistics.analyse_if_stale),
            Duty("analyse_workflows", SAMPLE_INTERVAL, statistics.analyse_workflows_if_stale),
            Duty("sample", SAMPLE_INTERVAL, lambda conn: samples.take(conn, settings.sample_retention)),
            # Before retention: the partitions of the hour and the next ones, made ahead.
            Duty("partitions", min(every, settings.partition_interval / 4),
                 lambda conn: partitions.maintain(conn, settings.partition_interval)),
            Duty("reap", every, self.reap_once),
            Duty("remove_workers", every, self.remove_workers_once),
        ]
        if settings.retention > 0:
            self.duties.append(Duty("retention", every, self.prune_once))
        self.duties.append(
            Duty("operations", SAMPLE_INTERVAL, lambda conn: operations.resume_stalled(conn, budget=operations.RESUME_BUDGET))
        )
        if settings.dead_letter_retention > 0:
            self.duties.append(Duty("dead_letter_retention", every, lambda conn: retention.prune_dead_letters(
                conn, settings.dead_letter_retention, budget=RETENTION_BUDGET)))
        if settings.audit_retention > 0:
            self.duties.append(Duty("audit_retention", every, lambda conn: audit.prune(conn, settings.audit_retention)))
        # After "sample": a minute's failed runs come from its samples.
        self.duties.append(Duty("rollup", SAMPLE_INTERVAL, rollup.take))
        keep = timedelta(seconds=settings.rollup_retention)
        self.duties.append(Duty("rollup_retention", every, lambda conn: rollup.prune(conn, keep)))
        # Periodic jobs: the leader fires them on their slots, not on an interval.
        self.schedules = ScheduleClock(settings)

    def run(self) -> int:
        self.wakeup = SelfPipe.for_child(stop=lambda *_: self.stopping.set(), quit=lambda *_: os._exit(0))
        reader = messages.Reader(self.command_fd)
        parent = os.getppid()
        self.name = f"{self.settings.hostname}:{os.getpid()}"
        log.info("maintenance.started pid=%s", os.getpid())
        try:
            url = self.settings.require_database_url()
        except ConfigError as exc:  # the supervisor halts rather than respawn it
            log.error("maintenance.boot_failed reason=%s", exc)
            return EXIT_BOOT_ERROR
        self.listen_for_control(url)
        closed = False  # the supervisor's end of the pipe closes when it dies
        while not self.stopping.is_set() and not closed and os.getppid() == parent:
            closed = self.receive(reader)
            self.pass_on_control()
            self.tick()
            self.wait()
        # Stopping: what the supervisor sent last (the workers it killed) still gets recovered.
        deadline = time.monotonic() + STOP_PATIENCE
        self.receive(reader)
        while self.pending and time.monotonic() < deadline:
            self.tick(lead=False)
            time.sleep(RECOVER_RETRY)
            self.receive(reader)
        if self.pending:
            log.warning("maintenance.unrecovered workers=%s: left to the stale reaper", len(self.pending))
        if self.conn is not None:
            self.conn.close()
        self.control.close()
        log.info("maintenance.exited")
        return 0

    def receive(self, reader: messages.Reader) -> bool:
        """Queue the supervisor's reports; True once the supervisor closed the pipe."""
        arrived, closed = reader.read()
        for message in arrived:
            if isinstance(message, messages.Spawned):
                self.live.add(message.worker_id)
            elif isinstance(message, messages.Gone):
                self.live.discard(message.worker_id)
                self.pending.append(Pending(message, time.monotonic()))
        return closed

    def listen_for_control(self, url: str) -> None:
        """Start the control listener. Its first connect counts as a reconnect: this
        process starts beside the workers, so a worker may claim a job and an operator
        cancel it before the listener listens; what was cancelled since this process
        started is asked for once it does (:meth:`pass_on_control`)."""
        self.control = Listener(url, application_name=f"jobq control {self.name}", channel=CONTROL_CHANNEL_GET)
        self.control_heard = time.monotonic()  # when the listener was last known to listen (at first: the start)
        self.control_connects = 0  # the listener's connects whose missed cancels were asked for
        self.control.connect()

    def pass_on_control(self) -> None:
        """Tell the supervisor what operators did since the last look (its workers act on
        it: a cancelled job stops, a paused queue's claimed jobs are not started). After
        each connect of the listener, the first one too, also the cancels of this host's
        jobs it may have missed while it was not listening (a NOTIFY sent then is lost)."""
        payloads = self.control.payloads()
        if self.control.connects != self.control_connects:
            self.control_connects = self.control.connects
            payloads += self.missed_cancels(time.monotonic() - self.control_heard + MISSED_MARGIN)
        if self.control.listening:
            self.control_heard = time.monotonic()
        for payload in payloads:
            if payload == SCHEDULES_CHANGED:
                self.schedules.wake()
                continue
            message = messages.control(payload)
            if message is not None and not messages.write(self.control_fd, message):
                log.warning("maintenance.control_dropped message=%s: the supervisor is not reading", payload)

    def missed_cancels(self, seconds: float) -> list[str]:
        """Cancels of this host's jobs in the last ``seconds``, as the control channel says
        them, asked on the listener's own connection once it listens again (what is
        cancelled from then on is heard)."""
        conn = self.control.conn
        try:
            assert conn is not None
            ids = control.cancelled_recently(conn, seconds, self.settings.hostname)
        except CONNECTION_ERRORS as exc:
            log.warning("maintenance.missed_cancels_unknown error=%s", connections.first_line(exc))
            return []
        if ids:
            log.info("maintenance.missed_cancels jobs=%s within=%.1fs", ",".join(map(str, ids)), seconds)
        return [f"cancel {job_id}" for job_id in ids]

    def wait(self) -> None:
        """Until the next thing to do: a retry of a recovery, a leader's pass, a schedule's
        slot; while disconnected, the next connect attempt (nothing else can be done
        before it), or a report or signal that arrives first."""
        now = time.monotonic()
        if self.conn is None:
            timeout = max(0.0, self.next_connect - now)
        else:
            timeout = RECOVER_RETRY if self.pending else max(0.0, self.next_lead - now)
            if self.leader:
                timeout = min(timeout, self.schedules.wait_seconds())
        listening = self.control.fileno()
        if listening is None:  # reconnect it soon
            timeout = min(timeout, RECOVER_RETRY * 10)
        self.wakeup.wait(timeout, [self.command_fd] + ([listening] if listening is not None else []))

    def tick(self, *, lead: bool = True) -> None:
        """Recover what can be recovered; lead when it is time. Database trouble is logged
        and retried later; it never ends the process."""
        if self.conn is None and not self.connect():
            return
        try:
            self.recover_pending()
            if lead and time.monotonic() >= self.next_lead:
                self.lead()
                self.next_lead = time.monotonic() + min(self.settings.reaper_interval, SAMPLE_INTERVAL)
            if lead and self.leader and self.schedules.due():
                self.run_duty("schedules", self.schedules.run_once)
        except CONNECTION_ERRORS as exc:
            log.warning("maintenance.db_error error=%s", connections.first_line(exc))
            self.disconnect()

    def run_duty(self, name: str, run_once: Callable[[Connection], T]) -> T | None:
        """One pass of a duty; None if it failed. Any error but a lost connection is
        logged with the duty's name and counted (maintenance_errors_total), and the duty
        runs again next pass: one duty's trouble never ends the process or keeps the
        others from running."""
        assert self.conn is not None
        try:
            return run_once(self.conn)
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:
            log.error("maintenance.duty_failed duty=%s error=%s: %s", name, type(exc).__name__, connections.first_line(exc))
            leases.count_events(self.conn, ERROR_COUNTER, [("", name)])
            return None

    def connect(self) -> bool:
        """Open the connection (with a counter slot of its own, :func:`jobq.store.connections.connect_counting`);
        False (logged, retried after a delay) while the database is down."""
        if time.monotonic() < self.next_connect:
            return False
        try:
            url = self.settings.require_database_url()
            name = f"jobq maintenance {self.name}"
            self.conn = connections.connect_counting(url, application_name=name, lock_base=self.lock_base)
        except DatabaseUnavailable as exc:
            delay = self.reconnect.next()
            log.warning("maintenance.db_unavailable retry_in=%.1fs error=%s", delay, exc)
            self.next_connect = time.monotonic() + delay
            return False
        self.reconnect.reset()
        return True

    def disconnect(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        if self.leader:
            log.info("maintenance.leadership_lost")
        self.leader = False

    def recover_pending(self) -> None:
        """Recover the jobs of the dead workers reported so far, where their locks are
        free; a worker whose jobs stay locked (or fail) past RECOVER_PATIENCE is left to
        the stale reaper."""
        still = []
        for entry in self.pending:
            gone = entry.gone
            if time.monotonic() - entry.since > RECOVER_PATIENCE:
                log.warning(
                    "maintenance.recover_gave_up worker=%s: its jobs are still locked; the stale reaper will take "
                    "them once their session ends",
                    gone.worker_id,
                )
                continue
            # First no more hand-offs to it (an enqueue handing it a job now is waited
            # for), so that the recovery sees every job claimed in its name.
            self.run_duty("recover", lambda conn: presence.stop_waiting(conn, gone.worker_id))
            recovered = self.run_duty(
                "recover", lambda conn: reaper.recover_worker(conn, self.settings, self.lock_base, gone)
            )
            if recovered is not None and not recovered.busy:
                self.run_duty("recover", lambda conn: presence.leave(conn, gone.worker_id))  # if it could not itself
                continue
            still.append(entry)
        self.pending = still

    def lead(self) -> None:
        """Cluster-wide duties, only under the leader lock, each on its own interval."""
        assert self.conn is not None
        if not self.leader:
            self.leader = bool(self.conn.execute(LEADER_TRY_LOCK, {"key": self.leader_key}).fetchone()[0])  # type: ignore[index]
            if not self.leader:
                return
            log.info("maintenance.leadership_acquired pid=%s", os.getpid())
        now = time.monotonic()
        for duty in self.duties:
            if now >= duty.next_at:
                self.run_duty(duty.name, duty.run_once)
                duty.next_at = now + duty.every

    def reap_once(self, conn: Connection) -> int:
        reaped = reaper.reap_stale(conn, self.settings, self.lock_base, spared=self.live).changed
        return reaped + limited.sweep_slots(conn, self.lock_base)

    def remove_workers_once(self, conn: Connection) -> int:
        removed = presence.remove_stale(conn, self.settings.stale_threshold)
        if removed:
            log.info("maintenance.workers_removed workers=%s", ",".join(removed))
        return len(removed)

    def prune_once(self, conn: Connection) -> int:
        return retention.prune(conn, self.settings.retention, budget=RETENTION_BUDGET)
