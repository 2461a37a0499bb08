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
