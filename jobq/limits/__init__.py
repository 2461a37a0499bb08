"""Flow control across every host: concurrency and rate limits per queue and per
concurrency key (rules on key patterns), decided in the claim's transaction and
released with the fenced outcome. See README's "Limits"."""

from jobq.limits.rates import Rate, parse_rate
from jobq.limits.rules import (
    KeyRule,
    QueueLimits,
    clear_limit,
    list_limits,
    queue_limits,
    set_limit,
    set_queue_limits,
)

__all__ = [
    "KeyRule", "QueueLimits", "Rate", "clear_limit", "list_limits", "parse_rate", "queue_limits", "set_limit",
    "set_queue_limits",
]
