"""The self-pipe that wakes a daemon process's loop.

Signal handlers only record; :func:`signal.set_wakeup_fd` writes a byte into the pipe
for every signal, so a loop waiting in ``select()`` returns at once and dispatches
what was recorded. Another thread of the process wakes the loop the same way
(:meth:`SelfPipe.wake`). The supervisor, each worker and the maintenance process use
one each.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SignalHandler = Callable[[int, Any], None]

# Signals meant for the supervisor (reload, more or fewer workers) that reach its
# children too when someone signals the whole process group.
SUPERVISOR_ONLY = (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU)


def reset_signals(signals: Iterable[int]) -> None:
    """In a freshly forked child: no signal writes into a pipe inherited from the parent
    any more, and ``signals`` have their default handlers again."""
    signal.set_wakeup_fd(-1)
    for signum in signals:
        signal.signal(signum, signal.SIG_DFL)


class SelfPipe:
    """A non-blocking pipe: write a byte to wake the loop, which selects on the read end."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    @classmethod
    def for_signals(cls, handlers: Mapping[int, SignalHandler], *, ignore: Iterable[int] = ()) -> SelfPipe:
        """A pipe that every signal writes to, with ``handlers`` installed and ``ignore``
        ignored. Call from the main thread."""
        pipe = cls()
        signal.set_wakeup_fd(pipe.write_fd)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for signum in ignore:
            signal.signal(signum, signal.SIG_IGN)
        return pipe

    @classmethod
    def for_child(cls, *, stop: SignalHandler, quit: SignalHandler, control: SignalHandler | None = None) -> SelfPipe:
        """A forked child's signals: TERM and INT ``stop``, QUIT ``quit``, USR1
        ``control`` (ignored without one), the supervisor's own signals ignored,
        SIGCHLD as the system has it."""
        handlers = {signal.SIGTERM: stop, signal.SIGINT: stop, signal.SIGQUIT: quit, signal.SIGCHLD: signal.SIG_DFL}
        return cls.for_signals(
            {**handlers, signal.SIGUSR1: control or signal.SIG_IGN}, ignore=SUPERVISOR_ONLY
        )

    def wake(self) -> None:
        """Wake the loop (from another thread)."""
        try:
            os.write(self.write_fd, b"!")
        except BlockingIOError:
            pass  # already full of wake-ups

    def pending(self) -> bool:
        """Whether a wake-up waits in the pipe (not drained yet)."""
        return bool(select.select([self.read_fd], [], [], 0)[0])

    def drain(self) -> None:
        """Forget the wake-ups so far."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> list[int]:
        """Block until a wake-up, one of ``fds`` is readable, or the timeout; return the
        readable fds (the pipe's drained)."""
        ready, _, _ = select.select([self.read_fd, *fds], [], [], max(0.0, timeout))
        if self.read_fd in ready:
            self.drain()
        return ready

    def close(self) -> None:
        """In a forked child: stop the signals writing here and close both ends."""
        signal.set_wakeup_fd(-1)
        os.close(self.read_fd)
        os.close(self.write_fd)
