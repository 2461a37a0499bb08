"""What a worker has finished and not written yet, in memory it shares with its
supervisor.

A worker writes its outcomes in batches (:mod:`jobq.daemon.worker.outcomes`): a job whose
handler returned waits a few milliseconds, in the worker's memory, for the next
write. A worker killed in those milliseconds would lose the outcome, and its job would
run again. So each success, each failure (its error, the delay before its next
attempt, the handler's limit of retries, its span) and each snooze (its delay) is also
noted in a :class:`FinishedArea`, before the next job starts. When a worker dies, the
supervisor takes what its area holds and tells maintenance, which records those jobs
done, failed or snoozed under their leases (a write the worker had committed after all
is rejected by the lease, as any stale write). A kill then runs again at most the job
that was running. Cancels and records too large for the room left are not noted: the
worker writes them before its next job starts. (Failures and snoozes were not noted
either until 6 December 2026: each was written on its own before the next job, and a
drain in which every other job failed, or snoozed, went at 1,100-1,500 jobs/s.)

The supervisor maps one area per worker before forking it (anonymous shared memory,
AREA bytes) and unmaps it once it has taken what the dead worker left. The area is a
header, then records one after the other, each (job id, lease, seconds, data length,
kind) and its data: the result's JSON text (a success), the failure's, or the snooze's
delay. The header is one 8-byte word, (start, end): the offset of the first record not
yet written and the end of the last. The worker appends a record and then moves the
end; after a write, it moves the start past what was written, and both back to 0 when
nothing waits. Each change of the header is one aligned store, which a kill cannot
tear, and a record is inside (start, end) only once it is whole. Only the worker writes
while it lives; the supervisor reads once it is dead.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass

AREA = 64 * 1024  # bytes per worker: a few thousand short results
_HEADER = struct.Struct("=II")  # start, end (offsets from the area's first byte)
_RECORD = struct.Struct("=qqdii")  # job id, lease, seconds, data length (-1: no data), kind
_NO_RESULT = -1
OUTCOMES = ("done", "failed", "snoozed")  # a record's kind is its outcome's index here
_DONE, _FAILED, _SNOOZED = range(len(OUTCOMES))


@dataclass(frozen=True, slots=True)
class Failure:
    """A run that raised: the error to record, the seconds before the next attempt, the
    limit of retries the handler set (None: the job's own) and the run's span."""

    error: str
    delay: float
    max_retries: int | None = None
    span: str | None = None

    def encode(self) -> str:
        return json.dumps([self.error, self.delay, self.max_retries, self.span])

    @classmethod
    def decode(cls, text: str) -> Failure:
        error, delay, max_retries, span = json.loads(text)
        return cls(error, float(delay), max_retries, span)


@dataclass(frozen=True, slots=True)
class Finished:
    """A job whose handler returned ``result`` (JSON text, None: no result), or raised
    (``failure``), or snoozed for ``snooze`` seconds, after ``seconds``, under ``lease``,
    and whose outcome may not be written yet."""

    job_id: int
    lease: int
    seconds: float
    result: str | None
    failure: Failure | None = None
    snooze: float | None = None

    @property
    def outcome(self) -> str:
        """done, failed or snoozed."""
        return OUTCOMES[_coded(self.result, self.failure, self.snooze, encode=False)[0]]

    @property
    def data(self) -> str | None:
        """The outcome as kept in text: the result's JSON, the failure's, or the snooze's delay."""
        return _coded(self.result, self.failure, self.snooze)[1]

    @classmethod
    def of(cls, job_id: int, lease: int, seconds: float, outcome: str, data: str | None) -> Finished:
        """The job whose ``outcome`` was kept as ``data`` (:attr:`data`)."""
        if outcome == "failed":
            return cls(job_id, lease, seconds, None, Failure.decode(data or ""))
        if outcome == "snoozed":
            return cls(job_id, lease, seconds, None, snooze=float(data or 0))
        return cls(job_id, lease, seconds, data)


def _coded(
    result: str | None, failure: Failure | None, snooze: float | None, *, encode: bool = True
) -> tuple[int, str | None]:
    """An outcome's kind (its index in OUTCOMES) and, with ``encode``, its data as text."""
    if failure is not None:
        return _FAILED, failure.encode() if encode else None
    if snooze is not None:
        return _SNOOZED, repr(snooze)
    return _DONE, result


def _padded(n: int) -> int:
    return (n + 7) & ~7


class FinishedArea:
    def __init__(self) -> None:
        self._area = mmap.mmap(-1, AREA)  # anonymous and shared: the forked worker writes, the supervisor reads

    def note(
        self, job_id: int, lease: int, seconds: float, result: str | None, failure: Failure | None = None,
        snooze: float | None = None,
    ) -> bool:
        """Append a :class:`Finished` job; False when there is no room for it (then
        write it before the next job starts). Per success: its fields, no object."""
        start, end = _HEADER.unpack_from(self._area, 0)
        end = end or _HEADER.size
        kind, text = _coded(result, failure, snooze)
        data = b"" if text is None else text.encode()
        size = _RECORD.size + _padded(len(data))
        if end + size > AREA:
            return False
        _RECORD.pack_into(self._area, end, job_id, lease, seconds, _NO_RESULT if text is None else len(data), kind)
        if data:
            self._area[end + _RECORD.size : end + _RECORD.size + len(data)] = data
        _HEADER.pack_into(self._area, 0, start or _HEADER.size, end + size)
        return True

    def end(self) -> int:
        """Where the last record ends (0: none waits): the mark to pass to
        :meth:`written` once everything noted so far is written."""
        return _HEADER.unpack_from(self._area, 0)[1]

    def written(self, upto: int) -> None:
        """The records up to ``upto`` (an :meth:`end` taken earlier) are written: no
        longer to be passed on."""
        if not upto:
            return
        _, end = _HEADER.unpack_from(self._area, 0)
        _HEADER.pack_into(self._area, 0, *((0, 0) if upto >= end else (upto, end)))

    def take(self) -> list[Finished]:
        """What the area holds (a dead worker's), and the area emptied."""
        start, end = _HEADER.unpack_from(self._area, 0)
        found = []
        offset = start
        while start and offset + _RECORD.size <= end:
            job_id, lease, seconds, length, kind = _RECORD.unpack_from(self._area, offset)
            first = offset + _RECORD.size
            data = None if length == _NO_RESULT else self._area[first : first + length].decode()
            found.append(Finished.of(job_id, lease, seconds, OUTCOMES[kind], data))
            offset = first + _padded(max(length, 0))
        _HEADER.pack_into(self._area, 0, 0, 0)
        return found

    def close(self) -> None:
        self._area.close()
