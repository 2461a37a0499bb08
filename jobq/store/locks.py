"""Advisory lock keys: a 16-bit namespace in the high bits, the job id in the low 48.

An application's own ``pg_advisory_lock(4017)`` therefore never collides with the
lock jobq holds on job 4017. jobq's own cluster-wide locks use reserved values at the
top of the 48-bit range, which job ids never reach.
"""

from __future__ import annotations

ID_BITS = 48
ID_MASK = (1 << ID_BITS) - 1
MAX_JOB_ID = ID_MASK - 16  # the top 16 values of the id range are reserved for jobq's own locks

MIGRATIONS = ID_MASK       # held by `jobq migrate` while it applies files
MAINTENANCE_LEADER = ID_MASK - 1  # held by the one maintenance process doing cluster-wide work


def key(namespace: int, value: int) -> int:
    """The signed 64-bit advisory key of ``value`` (a job id or a reserved value) in ``namespace``."""
    if not 0 <= namespace <= 0xFFFF:
        raise ValueError(f"advisory namespace must be 0..65535, got {namespace}")
    if not 0 <= value <= ID_MASK:
        raise ValueError(f"advisory value must fit in {ID_BITS} bits, got {value}")
    unsigned = (namespace << ID_BITS) | value
    return unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned


OPERATION_CLASS = 1  # added to the namespace's high word in an operation's key; the counter slots use 0


def operation_key(namespace: int, operation_id: int) -> tuple[int, int]:
    """The two-integer advisory key of bulk operation ``operation_id``'s runner:
    ``(namespace << 16 | 1, id)`` as signed 32-bit integers. Two-integer keys are a key
    space apart from the bigint keys of jobs, so operation 17 never meets job 17; ids
    past 2**32 wrap (two operations that far apart never run at once)."""
    if not 0 <= namespace <= 0xFFFF:
        raise ValueError(f"advisory namespace must be 0..65535, got {namespace}")
    return _int32((namespace << 16) | OPERATION_CLASS), _int32(operation_id & 0xFFFFFFFF)


def _int32(unsigned: int) -> int:
    return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned
