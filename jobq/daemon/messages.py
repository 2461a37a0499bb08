"""What crosses the pipes of the daemon, one text line per message.

Worker -> supervisor (the worker's report pipe): ``B`` (:class:`BootError`), ``K``
(:class:`Blocked`).
(The job a worker runs, a :class:`Started`, is on the job board instead: shared
memory, no message per job, :mod:`jobq.daemon.boards.jobs`.)

Supervisor -> maintenance: ``S`` (:class:`Spawned`), ``G`` (:class:`Gone`), and before
a ``G`` its ``D``, ``F`` and ``Z`` lines (:class:`Noted`), which the :class:`Reader` hands over
inside the ``Gone``, as ``finished``.

Maintenance -> supervisor, and supervisor -> each worker (its control pipe, read when
a SIGUSR1 says there is something): ``C`` (:class:`Cancel`), ``P`` (:class:`Pause`).
"""

from __future__ import annotations

import fcntl
import os
import signal
from dataclasses import dataclass, replace

from jobq.daemon.boards.finished import OUTCOMES, Finished

PIPE_SIZE = 1 << 20  # room for every message between two reads, whatever comes
_F_SETPIPE_SZ = 1031


@dataclass(slots=True)  # not frozen: one a job (see jobq.handlers.execution.RunResult)
class Started:
    """The job a worker runs: its lease, its deadline (system-wide monotonic clock) and
    its timeout."""

    job_id: int
    lease: int
    deadline: float
    timeout: float


@dataclass(frozen=True, slots=True)
class BootError:
    """``B <reason>``: the worker cannot boot (then exits)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Blocked:
    """``K``: the worker's jobs wait (on I/O, a lock, a sleep) or run long, so that more
    workers would run more of them at once (:mod:`jobq.daemon.pool`)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """``C <job_id>``: the job was cancelled; a worker stops running it, or does not
    start it."""

    job_id: int


@dataclass(frozen=True, slots=True)
class Pause:
    """``P <queue>``: the queue was paused; a worker does not start its jobs already claimed."""

    queue: str


@dataclass(frozen=True, slots=True)
class Spawned:
    """``S <worker_id>``: a worker of this supervisor is alive (sent at its spawn, and
    for every live worker to a maintenance process spawned again). The stale reaper
    leaves its jobs alone, however late their heartbeat: its own session re-locks them
    when it is back, and its ``G`` recovers them if it dies."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class Gone:
    """``G <worker_id> <job_id> <lease> <kind> <timeout> <detail>``: a worker is gone;
    maintenance recovers its in-flight jobs. ``kind`` is ``crash``, ``timeout``,
    ``cancel`` or ``shutdown``; ``job_id`` and ``lease`` are 0 when it ran no job."""

    worker_id: str
    job_id: int  # 0: no job was running
    lease: int
    kind: str  # crash | timeout | cancel | shutdown
    timeout: float
    detail: str
    finished: tuple[Finished, ...] = ()  # jobs it had finished, their outcomes perhaps not written

    @classmethod
    def of(
        cls, worker_id: str, running: Started | None, kind: str, status: int, finished: list[Finished]
    ) -> Gone:
        """The report of a worker that exited with wait ``status`` while it ran
        ``running``, having finished ``finished`` (a job whose handler had returned was
        no longer running, even if the board still showed it)."""
        detail, done = describe_exit(status), tuple(finished)
        if running is None or any(f.job_id == running.job_id and f.lease == running.lease for f in done):
            return cls(worker_id, 0, 0, kind, 0.0, detail, done)
        return cls(worker_id, running.job_id, running.lease, kind, running.timeout, detail, done)


@dataclass(frozen=True, slots=True)
class Noted:
    """``D <worker_id> <job_id> <lease> <seconds> <result>``: one job the gone worker
    had finished and perhaps not written (from its finished area,
    :mod:`jobq.daemon.boards.finished`), sent before its ``G``; ``result`` is JSON
    text, empty for none. ``F <worker_id> <job_id> <lease> <seconds> <failure>``: the
    same for a run that raised, the failure as JSON text (one line); ``Z ... <delay>``:
    for a run that snoozed."""

    worker_id: str
    finished: Finished


def describe_exit(status: int) -> str:
    """A wait status in words: ``exit code 1``, ``killed by signal 9 (SIGKILL)``."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exit code {code}"


Message = BootError | Blocked | Spawned | Gone | Cancel | Pause


def encode(message: Message) -> bytes:
    if isinstance(message, BootError):
        line = "B " + _one_line(message.reason)
    elif isinstance(message, Blocked):
        line = "K"
    elif isinstance(message, Cancel):
        line = f"C {message.job_id}"
    elif isinstance(message, Pause):
        line = "P " + _one_line(message.queue)
    elif isinstance(message, Spawned):
        line = f"S {message.worker_id}"
    else:
        noted = "".join(f"{_noted_line(message.worker_id, f)}\n" for f in message.finished)
        line = noted + (
            f"G {message.worker_id} {message.job_id} {message.lease} {message.kind} "
            f"{message.timeout:g} {_one_line(message.detail)}"
        )
    return line.encode("utf-8", "replace") + b"\n"


def decode(line: bytes) -> Message | Noted:
    """Parse one line (without its newline). Raises ValueError on garbage."""
    text = line.decode("utf-8", "replace")
    tag, _, rest = text.partition(" ")
    if tag == "B":
        return BootError(rest)
    if tag == "K":
        return Blocked()
    if tag == "C":
        return Cancel(int(rest))
    if tag == "P":
        return Pause(rest)
    if tag == "S":
        return Spawned(rest)
    if tag == "G":
        worker_id, job_id, lease, kind, timeout, detail = rest.split(" ", 5)
        return Gone(worker_id, int(job_id), int(lease), kind, float(timeout), detail)
    if tag in _NOTED_TAGS:
        worker_id, job_id, lease, seconds, data = rest.split(" ", 4)
        outcome = OUTCOMES[_NOTED_TAGS.index(tag)]
        return Noted(worker_id, Finished.of(int(job_id), int(lease), float(seconds), outcome, data or None))
    raise ValueError(f"unknown report {text[:40]!r}")


_NOTED_TAGS = "DFZ"  # a Noted line's tag, by its outcome's index in OUTCOMES: done, failed, snoozed


def _noted_line(worker_id: str, f: Finished) -> str:
    """A :class:`Noted` job's line: ``D`` a success, ``F`` a failure, ``Z`` a snooze."""
    tag = _NOTED_TAGS[OUTCOMES.index(f.outcome)]
    return f"{tag} {worker_id} {f.job_id} {f.lease} {f.seconds!r} {f.data or ''}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Reader:
    """Reads whole messages from a non-blocking pipe as they arrive."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._partial = b""
        self._noted: dict[str, list[Finished]] = {}  # D lines waiting for their G

    def read(self) -> tuple[list[Message], bool]:
        """The messages available now, and whether the writer has closed the pipe."""
        chunks, closed = [], False
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                closed = True
                break
            chunks.append(chunk)
        data = self._partial + b"".join(chunks)
        *lines, self._partial = data.split(b"\n")
        messages = []
        for message in (decode(line) for line in lines if line):
            if isinstance(message, Noted):
                self._noted.setdefault(message.worker_id, []).append(message.finished)
            elif isinstance(message, Gone) and message.worker_id in self._noted:
                messages.append(replace(message, finished=tuple(self._noted.pop(message.worker_id))))
            else:
                messages.append(message)
        return messages, closed


def control(payload: str) -> Cancel | Pause | None:
    """The message of a ``jobq_control`` notification (``cancel <id>``, ``pause <queue>``);
    None for one the daemon need not act on (``resume``: the claim sees it) or garbage."""
    verb, _, subject = payload.partition(" ")
    if verb == "cancel" and subject.isdigit():
        return Cancel(int(subject))
    if verb == "pause" and subject:
        return Pause(subject)
    return None


def write(fd: int, message: Message) -> bool:
    """Write one message to a non-blocking pipe; False if it could not (full, or its
    reader is gone)."""
    try:
        os.write(fd, encode(message))
    except OSError:
        return False
    return True


def report_pipe() -> tuple[int, int]:
    """A pipe (read end non-blocking, both ends close-on-exec) sized for bursts."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    try:
        fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # over /proc/sys/fs/pipe-max-size: the default size still works
        pass
    return read_fd, write_fd


def control_pipe() -> tuple[int, int]:
    """A report pipe whose write end never blocks either, for a writer that must not
    stall on its reader: the supervisor passing a cancel down to a worker, the
    maintenance process passing an operator's action up."""
    read_fd, write_fd = report_pipe()
    os.set_blocking(write_fd, False)
    return read_fd, write_fd
