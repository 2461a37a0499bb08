"""The maintenance process: one child of each supervisor.

Host-local work, always: settle the jobs of this supervisor's workers that died or
were killed (the supervisor sends a ``Gone`` report over a pipe), as soon as their
locks are free.

Cluster-wide work, only while it holds the leader lock (several hosts may run
``jobq worker`` against one database; one of them leads): the stale reaper, the
removal of dead workers' rows, retention (JOBQ_RETENTION), and the samples of the
counters that trailing-window metrics are computed from. Each duty is a ``run_once`` that returns counts and
logs only when it changed something.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass

import psycopg

from jobq import db, locks, metrics_samples, queries, retention
from jobq.daemon import presence, reaper, reports
from jobq.errors import DatabaseUnavailable
from jobq.settings import Settings

log = logging.getLogger(__name__)

SETTLE_RETRY = 0.05  # seconds between two tries at a dead worker's locks
SETTLE_PATIENCE = 30.0  # after this, a dead worker's jobs are left to the stale reaper
STOP_PATIENCE = 5.0  # at shutdown, how long pending settlements may still take
RETENTION_BUDGET = 1.0  # seconds of deleting per leader pass; the rest waits for the next one
SAMPLE_INTERVAL = 5.0  # seconds between two samples of the totals (trailing-window rates)


@dataclass
class Pending:
    gone: reports.Gone
    since: float


class Maintenance:
    """Built before the fork; :meth:`run` in the child."""

    def __init__(self, settings: Settings, command_fd: int) -> None:
        self.settings = settings
        self.command_fd = command_fd
        self.lock_base = locks.key(settings.advisory_namespace, 0)
        self.leader_key = locks.key(settings.advisory_namespace, locks.MAINTENANCE_LEADER)
        self.stopping = threading.Event()
        self.pending: list[Pending] = []
        self.conn: psycopg.Connection | None = None
        self.leader = False
        self.next_lead = 0.0
        self.next_reap = 0.0
        self.next_sample = 0.0
        self.reconnect = db.ReconnectDelay()
        self.next_connect = 0.0

    def run(self) -> int:
        self.install_signals()
        reader = reports.Reader(self.command_fd)
        parent = os.getppid()
        log.info("maintenance.started pid=%s", os.getpid())
        closed = False  # the supervisor's end of the pipe closes when it dies
        while not self.stopping.is_set() and not closed and os.getppid() == parent:
            closed = self.receive(reader)
            self.tick()
            self.wait()
        # Stopping: what the supervisor sent last (the workers it killed) still gets settled.
        deadline = time.monotonic() + STOP_PATIENCE
        self.receive(reader)
        while self.pending and time.monotonic() < deadline:
            self.tick(lead=False)
            time.sleep(SETTLE_RETRY)
            self.receive(reader)
        if self.pending:
            log.warning("maintenance.unsettled workers=%s: left to the stale reaper", len(self.pending))
        if self.conn is not None:
            self.conn.close()
        log.info("maintenance.exited")
        return 0

    def receive(self, reader: reports.Reader) -> bool:
        """Queue the supervisor's reports; True once the supervisor closed the pipe."""
        messages, closed = reader.read()
        self.pending += [Pending(m, time.monotonic()) for m in messages if isinstance(m, reports.Gone)]
        return closed

    def install_signals(self) -> None:
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        signal.signal(signal.SIGQUIT, lambda *_: os._exit(0))
        for ignored in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
            signal.signal(ignored, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def wait(self) -> None:
        timeout = SETTLE_RETRY if self.pending else max(0.0, self.next_lead - time.monotonic())
        if self.conn is None:
            timeout = min(timeout, max(0.0, self.next_connect - time.monotonic()))
        select.select([self.command_fd, self.wake_r], [], [], timeout)
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def tick(self, *, lead: bool = True) -> None:
        """Settle what can be settled; lead when it is time. Database trouble is logged
        and retried later; it never ends the process."""
        if self.conn is None and not self.connect():
            return
        try:
            self.settle_pending()
            if lead and time.monotonic() >= self.next_lead:
                self.lead()
                self.next_lead = time.monotonic() + min(self.settings.reaper_interval, SAMPLE_INTERVAL)
        except (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailable) as exc:
            log.warning("maintenance.db_error error=%s", db.first_line(exc))
            self.disconnect()

    def connect(self) -> bool:
        if time.monotonic() < self.next_connect:
            return False
        try:
            self.conn = db.connect(self.settings.require_database_url(), application_name="jobq maintenance")
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

    def settle_pending(self) -> None:
        assert self.conn is not None
        still = []
        for entry in self.pending:
            gone = entry.gone
            settled = reaper.settle_worker(
                self.conn,
                self.settings,
                self.lock_base,
                worker_id=gone.worker_id,
                job_id=gone.job_id,
                lease=gone.lease,
                kind=gone.kind,
                timeout=gone.timeout,
                detail=gone.detail,
            )
            if not settled.busy:
                presence.leave(self.conn, gone.worker_id)  # its row, if it could not remove it itself
                continue
            if time.monotonic() - entry.since > SETTLE_PATIENCE:
                log.warning(
                    "maintenance.settle_gave_up worker=%s jobs=%s: their locks are still held; the stale reaper "
                    "will take them once their session ends",
                    gone.worker_id, settled.busy,
                )
                continue
            still.append(entry)
        self.pending = still

    def lead(self) -> None:
        """Cluster-wide duties, only under the leader lock, each on its own interval."""
        assert self.conn is not None
        if not self.leader:
            self.leader = bool(self.conn.execute(queries.LEADER_TRY_LOCK, {"key": self.leader_key}).fetchone()[0])  # type: ignore[index]
            if not self.leader:
                return
            log.info("maintenance.leadership_acquired pid=%s", os.getpid())
        now = time.monotonic()
        if now >= self.next_sample:
            metrics_samples.take(self.conn)
            self.next_sample = now + SAMPLE_INTERVAL
        if now >= self.next_reap:
            reaper.reap_stale(self.conn, self.settings, self.lock_base)
            removed = presence.remove_stale(self.conn, self.settings.stale_threshold)
            if removed:
                log.info("maintenance.workers_removed workers=%s", ",".join(removed))
            if self.settings.retention > 0:
                retention.prune(self.conn, self.settings.retention, budget=RETENTION_BUDGET)
            self.next_reap = now + self.settings.reaper_interval
