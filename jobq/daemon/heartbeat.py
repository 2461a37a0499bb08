"""A worker's heartbeat thread.

Every HEARTBEAT tick it keeps the worker's row in ``workers`` and its in-flight jobs'
``heartbeat_at`` fresh, on the claim session, also while the main thread is inside
a CPU-bound handler (pure Python gives up the interpreter every few milliseconds).
Every TICK it checks two things: that the parent supervisor is alive, and whether the
running job has run longer than DEFER_RUNNING; then it marks that job running and
hands the rest of the batch back to the queue.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from jobq import claims
from jobq.daemon import presence
from jobq.errors import DatabaseUnavailable

if TYPE_CHECKING:
    from jobq.daemon.worker import Worker

log = logging.getLogger(__name__)

TICK = 0.025
DEFER_RUNNING = 0.05  # a job running longer than this is marked running, and its batch handed back


class Heartbeat(threading.Thread):
    def __init__(self, worker: Worker) -> None:
        super().__init__(name="jobq-heartbeat", daemon=True)
        self.worker = worker
        self.done = threading.Event()

    def run(self) -> None:
        next_beat = time.monotonic()
        while not self.done.wait(TICK):
            try:
                if os.getppid() != self.worker.parent_pid:
                    self.worker.request_stop("parent died")
                    self.worker.wake()
                self.mark_long_job()
                if time.monotonic() >= next_beat:
                    self.beat()
                    next_beat = time.monotonic() + self.worker.settings.heartbeat_interval
            except DatabaseUnavailable:
                return  # asked to stop while the database was down
            except Exception:  # the heartbeat must outlive any one failure; the main thread decides
                log.exception("worker.heartbeat_failed worker=%s", self.worker.worker_id)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)

    def beat(self) -> None:
        worker = self.worker
        with worker.state_lock:
            current = worker.current.claimed.job.id if worker.current else None

        def write(conn, _retried):  # type: ignore[no-untyped-def]
            if not presence.beat(conn, worker.worker_id, current, worker.jobs_done):
                presence.register(conn, worker.worker_id, socket.gethostname(), os.getpid(), worker.queues)
            held = list(worker.session.held.values())  # under the session lock: current
            return claims.heartbeat(conn, held).result() if held else set()

        lost = worker.session.run(write)
        for job_id in sorted(lost):
            log.warning("job.lost id=%s worker=%s: its lease was taken away", job_id, worker.worker_id)

    def mark_long_job(self) -> None:
        worker = self.worker
        with worker.state_lock:
            running = worker.current
            if running is None or running.marked:
                return
            elapsed = time.monotonic() - running.started
            if elapsed < DEFER_RUNNING:
                return
            running.marked = True
            leftovers = list(worker.batch)
            worker.batch.clear()
        worker.session.run(lambda conn, _: claims.start(conn, [running.held], [elapsed]).result())
        worker.give_back(leftovers)
