"""The global retry delay (jobq.handlers.backoff): base times two to the attempt, capped,
with jitter (no database)."""

import random

import pytest

from jobq.handlers.backoff import retry_delay

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("attempt", "nominal"), [(0, 5), (1, 10), (2, 20), (3, 40), (9, 2560), (10, 3600), (50, 3600)])
def test_delay_is_base_times_two_to_the_attempt_capped(attempt, nominal):
    delays = [retry_delay(attempt, base=5, cap=3600, jitter=0.1, rand=random.Random(seed)) for seed in range(200)]
    assert all(nominal * 0.9 <= d <= nominal * 1.1 for d in delays)
    # the jitter really spreads the delays over most of its range
    assert max(delays) - min(delays) > nominal * 0.15


def test_without_jitter_the_delay_is_exact():
    assert retry_delay(2, base=5, cap=3600, jitter=0) == 20


def test_negative_attempt_is_refused():
    with pytest.raises(ValueError):
        retry_delay(-1, base=5, cap=60, jitter=0.1)
