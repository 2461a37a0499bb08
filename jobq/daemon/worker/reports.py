"""A worker's side of its report pipe to the supervisor (:mod:`jobq.daemon.messages`):
that it could not boot, and that its jobs wait or run long, so that more workers would
run more of them at once (:mod:`jobq.daemon.pool`: the supervisor may grow its pool).

The second is said at most once every BLOCKED_EVERY seconds, from the main thread after
a batch or from the heartbeat thread when a job turns out long: one short write to a
pipe, atomic from either thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from jobq.daemon import messages

log = logging.getLogger(__name__)

BLOCKED_EVERY = 0.2  # seconds: the supervisor looks every tick (0.1 s) and doubles its pool at most once a tick


class Reports:
    def __init__(self, fd: int, *, worker_id: str = "", pool_grows: bool = True) -> None:
        """``pool_grows``: whether the supervisor may start more workers (not when its
        pool is fixed): without it, no report says the jobs block."""
        self.fd = fd
        self.worker_id = worker_id
        self.pool_grows = pool_grows
        self._next_blocked = 0.0
        self._lock = threading.Lock()

    def boot_error(self, reason: str) -> None:
        self._write(messages.BootError(reason))

    def blocked(self) -> None:
        """The jobs of this worker wait or run long (said again only after BLOCKED_EVERY)."""
        if not self.pool_grows:
            return
        now = time.monotonic()
        with self._lock:
            if now < self._next_blocked:
                return
            self._next_blocked = now + BLOCKED_EVERY
        self._write(messages.Blocked())

    def _write(self, message: messages.Message) -> None:
        try:
            os.write(self.fd, messages.encode(message))
        except BlockingIOError:
            log.warning("worker.report_dropped worker=%s: the supervisor is not reading", self.worker_id)
        except OSError:
            pass  # the supervisor is gone; the parent check stops us
