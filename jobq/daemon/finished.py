"""What each worker of a supervisor has finished and not written yet, on shared memory.

A worker writes its outcomes in batches (:mod:`jobq.daemon.outcomes`): a job whose
handler returned waits a few milliseconds, in the worker's memory, for the next
write. A worker killed in those milliseconds would lose the outcome, and its job would
run again. So each success is also noted here, before the next job starts; when a
worker dies, the supervisor takes what its slot holds and tells maintenance, which
records those jobs done under their leases (a write the worker had committed after
all is rejected by the lease, as any stale write). A kill then runs again at most the
job that was running. Failures, snoozes and results too large for the slot are not
noted: the worker writes them before its next job starts.

One area per worker slot: a header, then records one after the other, each (job id,
lease, seconds, result length) and the result's JSON text. The header is one 8-byte
word, (start, end): the offset of the first record not yet written and the end of the
last. The worker appends a record and then moves the end; after a write, it moves the
start past what was written, and both back to 0 when nothing waits. Each change of
the header is one aligned store, which a kill cannot tear, and a record is inside
(start, end) only once it is whole. Only the worker writes its slot while it lives;
the supervisor reads (and clears) it once the worker is dead.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

from jobq.daemon.idle import SLOTS

AREA = 64 * 1024  # bytes per worker slot: a few thousand short results
_HEADER = struct.Struct("=II")  # start, end (offsets from the slot's first byte)
_RECORD = struct.Struct("=qqdi4x")  # job id, lease, seconds, result length (-1: no result)
_NO_RESULT = -1


@dataclass(frozen=True, slots=True)
class Finished:
    """A job whose handler returned ``result`` (JSON text, None: no result) after
    ``seconds``, under ``lease``, and whose outcome may not be written yet."""

    job_id: int
    lease: int
    seconds: float
    result: str | None


def _padded(n: int) -> int:
    return (n + 7) & ~7


class FinishedBoard:
    def __init__(self, slots: int = SLOTS) -> None:
        self._board = mmap.mmap(-1, slots * AREA)  # anonymous and shared: inherited by every fork

    def _header(self, slot: int) -> tuple[int, int]:
        return _HEADER.unpack_from(self._board, slot * AREA)

    def _set_header(self, slot: int, start: int, end: int) -> None:
        _HEADER.pack_into(self._board, slot * AREA, start, end)

    def note(self, slot: int, job_id: int, lease: int, seconds: float, result: str | None) -> bool:
        """Append a :class:`Finished` job to the slot; False when the slot has no room for
        it (then write it before the next job starts). Per job: its fields, no object."""
        base = slot * AREA
        start, end = _HEADER.unpack_from(self._board, base)
        end = end or _HEADER.size
        data = b"" if result is None else result.encode()
        size = _RECORD.size + _padded(len(data))
        if end + size > AREA:
            return False
        _RECORD.pack_into(self._board, base + end, job_id, lease, seconds, _NO_RESULT if result is None else len(data))
        if data:
            self._board[base + end + _RECORD.size : base + end + _RECORD.size + len(data)] = data
        _HEADER.pack_into(self._board, base, start or _HEADER.size, end + size)
        return True

    def end(self, slot: int) -> int:
        """Where the slot's last record ends (0: none waits): the mark to pass to
        :meth:`written` once everything noted so far is written."""
        return self._header(slot)[1]

    def written(self, slot: int, upto: int) -> None:
        """The records up to ``upto`` (an :meth:`end` taken earlier) are written: no
        longer to be passed on."""
        _, end = self._header(slot)
        if not upto:
            return
        if upto >= end:
            self._set_header(slot, 0, 0)
        else:
            self._set_header(slot, upto, end)

    def take(self, slot: int) -> list[Finished]:
        """What the slot holds, and the slot cleared (for a dead worker's slot, before
        it is given to another)."""
        start, end = self._header(slot)
        found = []
        offset = start
        while start and offset + _RECORD.size <= end:
            job_id, lease, seconds, length = _RECORD.unpack_from(self._board, slot * AREA + offset)
            first = slot * AREA + offset + _RECORD.size
            result = None if length == _NO_RESULT else self._board[first : first + length].decode()
            found.append(Finished(job_id, lease, seconds, result))
            offset += _RECORD.size + _padded(max(length, 0))
        self.clear(slot)
        return found

    def clear(self, slot: int) -> None:
        self._set_header(slot, 0, 0)
