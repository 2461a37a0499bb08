"""jobq.store.connections' pure parts (no database): the delay between reconnects."""

import pytest

from jobq.store import connections

pytestmark = pytest.mark.unit


def test_reconnect_delay_doubles_to_its_cap_and_resets():
    delay = connections.ReconnectDelay(first=0.2, cap=1.0)
    assert [delay.next() for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    delay.reset()
    assert delay.next() == 0.2
