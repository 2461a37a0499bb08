"""Retry delays: how long a failed job waits before it runs again, ``base * 2**attempt``,
capped, with symmetric jitter. (Reconnecting to the database waits by its own rule,
:class:`jobq.store.connections.ReconnectDelay`.)
"""

from __future__ import annotations

import random


def retry_delay(
    attempt: int, *, base: float, cap: float, jitter: float, rand: random.Random | None = None
) -> float:
    """Seconds to wait before the run after failed run number ``attempt`` (0-based).

    The nominal delay ``min(cap, base * 2**attempt)`` is scaled by a uniform factor in
    ``[1 - jitter, 1 + jitter]``, so that jobs that failed together do not all return
    together. The result is never negative.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    nominal = min(cap, base * 2.0 ** min(attempt, 64))
    factor = 1.0 + jitter * (2.0 * (rand or random).random() - 1.0)
    return max(0.0, nominal * factor)
