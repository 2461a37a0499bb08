"""The worker's garbage collector, set for a loop that makes thousands of objects a claim.

A claim of 1,000 jobs makes several thousand objects the collector tracks (each job, its
payload, its lists, its claim and flight), and they all live until the batch is done.
With CPython's first threshold of 700 allocations the collector ran several times a
claim, each pass walking the batch's survivors again, and every older pass walking
whatever the worker keeps for its whole life (the modules, the handlers, the
connections). Measured on a drain of 100,000 noop jobs with 2 workers (PostgreSQL 16,
2 cores): 41,800 jobs/s with the defaults, 45,300-46,200 with the collector off,
43,300-47,000 with :func:`settle` (benchmark/README.md, "The worker's garbage
collector, and a claim's empty errors").

Cyclic garbage a handler leaves is still collected, a pass every ten thousand
allocations instead of seven hundred; nothing else changes.
"""

from __future__ import annotations

import gc

FIRST_THRESHOLD = 10_000  # allocations between passes over the youngest generation


def settle() -> None:
    """Once booted: what the worker holds for its whole life moved out of the
    collector's passes (gc.freeze), and the youngest generation collected every
    FIRST_THRESHOLD allocations; the older generations' thresholds kept."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(FIRST_THRESHOLD, middle, oldest)
