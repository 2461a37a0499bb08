"""Seeing what the queue does: metrics (:mod:`.metrics`), samples of the totals for
rates (:mod:`.samples`), the per-minute rollup (:mod:`.rollup`), counts by filter
(:mod:`.tallies`), ``jobq inspect``'s snapshot (:mod:`.inspection`) and the worker
processes (:mod:`.workers`)."""
