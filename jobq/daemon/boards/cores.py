"""Turns at the cores: at most so many of a supervisor's workers run batches of short,
CPU-bound jobs at once (``JOBQ_SHORT_JOB_WORKERS``, by default the CPU count).

A worker running short jobs spends its time on its own CPU and its server backend's:
claiming, decoding, running, writing outcomes. Eight such workers on two cores share
them with their eight backends, and a drain of noop jobs went a quarter slower than with
two workers (benchmark/README.md, "Turns at the cores"). So a worker whose last batch was
short and kept its CPU busy (:attr:`jobq.daemon.worker.pacing.Pace.wants_a_core`) claims
and runs its next batches holding one of the supervisor's tokens, and gives it back when
it finds nothing to claim, when a job of its batch turns out long, or when it stops. A
worker that finds no token free writes the outcomes it has buffered and waits for one. A
worker whose jobs are long, or wait on I/O (they block about once a job or more),
takes no token: all of them work, as many as ``--concurrency`` says.

The tokens are POSIX record locks (``fcntl.lockf``) on the bytes of an unlinked file the
supervisor makes before it forks, inherited by every worker. A process's record locks
go with it: a worker killed with SIGKILL holding a token frees it. They are the
process's own (not its file descriptor's), so two threads of one worker never exclude
each other, and a worker holds one token at most.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import tempfile
import threading

log = logging.getLogger(__name__)


class CoreTokens:
    """Made by the supervisor before it forks (no token: ``tokens`` 0); each worker
    takes and gives back its own."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self._file = tempfile.TemporaryFile() if tokens else None  # unlinked: gone with the last process
        self._held: tuple[int, int] | None = None  # (pid, token): a fork inherits the note, not the lock
        self._lock = threading.Lock()  # the worker's main thread takes; its heartbeat thread may give back

    @property
    def held(self) -> bool:
        return self._token() is not None

    def _token(self) -> int | None:
        """The token this process holds."""
        if self._held is None or self._held[0] != os.getpid():
            return None
        return self._held[1]

    def take(self, first: int = 0) -> bool:
        """Whether this process holds a token now (taken now, from byte ``first`` on, or
        held already). Never waits. No tokens: always."""
        if self._file is None:
            return True
        with self._lock:
            if self._token() is not None:
                return True
            for i in range(self.tokens):
                token = (first + i) % self.tokens
                try:
                    fcntl.lockf(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, token)
                except OSError as exc:
                    if exc.errno in (errno.EACCES, errno.EAGAIN):  # another worker's
                        continue
                    # The file is no longer what the supervisor made (a handler closed
                    # or replaced its descriptor): this worker runs without turns
                    # rather than wait for a token it can never take.
                    log.warning("worker.turns_off pid=%s error=%s", os.getpid(), exc)
                    self._file = None
                    return True
                self._held = (os.getpid(), token)
                return True
            return False

    def give_back(self) -> None:
        """Let go of the token this process holds, if any."""
        if self._file is None:
            return
        with self._lock:
            token = self._token()
            if token is not None:
                fcntl.lockf(self._file, fcntl.LOCK_UN, 1, token)
            self._held = None
