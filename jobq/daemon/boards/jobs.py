"""What each worker of a supervisor is running, on a shared memory board: one record per
worker slot, written by the worker as it starts a job (and cleared when it goes idle),
read by the supervisor on its ticks (to kill a worker past its job's deadline) and when
a worker dies (to say which job it was running, so that the job is charged the attempt
that killed it).

This replaces a report per job on a pipe: a system call in the worker and a message to
decode in the supervisor for every job, a tenth of the CPU of a drain of short jobs.

A record is (sequence, job id, lease, deadline, timeout). Its one writer makes the
sequence odd, writes the fields, and makes it even again; a reader takes a record only
when it read the same even sequence before and after the fields (a sequence lock), so
it never sees half of one job and half of the next. A worker killed (or stopped) in the
middle of a write leaves the sequence odd: its record reads as no job, which is true
(the handler starts after the write), and the next writer of the slot starts afresh.
"""

from __future__ import annotations

import mmap
import struct

from jobq.daemon.boards.idle import SLOTS
from jobq.daemon.messages import Started

_SEQUENCE = struct.Struct("=Q")
_FIELDS = struct.Struct("=qqdd")  # job id (0: none), lease, deadline (system-wide monotonic clock), timeout
_RECORD = _SEQUENCE.size + _FIELDS.size
READ_ATTEMPTS = 100  # a write takes a microsecond: a sequence still odd after this is a dead or stopped writer


class JobBoard:
    def __init__(self, slots: int = SLOTS) -> None:
        self._board = mmap.mmap(-1, slots * _RECORD)  # anonymous and shared: inherited by every fork

    def show(self, slot: int, started: Started | None) -> None:
        """The worker in ``slot`` runs ``started``'s job now (None: no job). One writer
        per slot: the worker, or the supervisor while the slot has no live worker."""
        offset = slot * _RECORD
        (sequence,) = _SEQUENCE.unpack_from(self._board, offset)
        sequence += sequence % 2  # odd: its last writer died mid-write
        _SEQUENCE.pack_into(self._board, offset, sequence + 1)
        if started is None:
            _FIELDS.pack_into(self._board, offset + _SEQUENCE.size, 0, 0, 0.0, 0.0)
        else:
            _FIELDS.pack_into(
                self._board, offset + _SEQUENCE.size, started.job_id, started.lease, started.deadline, started.timeout
            )
        _SEQUENCE.pack_into(self._board, offset, sequence + 2)

    def running(self, slot: int) -> Started | None:
        """The job the worker in ``slot`` runs now, as it last showed it."""
        offset = slot * _RECORD
        for _ in range(READ_ATTEMPTS):
            (before,) = _SEQUENCE.unpack_from(self._board, offset)
            if before % 2:
                continue
            job_id, lease, deadline, timeout = _FIELDS.unpack_from(self._board, offset + _SEQUENCE.size)
            (after,) = _SEQUENCE.unpack_from(self._board, offset)
            if after == before:
                return Started(job_id, lease, deadline, timeout) if job_id else None
        return None  # its writer stopped mid-write: no handler runs (yet) in that slot
