import pytest

from jobq.store import locks

pytestmark = pytest.mark.unit


def test_job_key_puts_the_namespace_in_the_high_bits():
    assert locks.key(0x6A71, 4017) == (0x6A71 << 48) | 4017
    assert locks.key(0x6A71, 4017) != 4017


def test_keys_of_namespaces_with_the_top_bit_are_signed_64_bit():
    key = locks.key(0xFFFF, 1)
    assert -(2**63) <= key < 0
    assert key & locks.ID_MASK == 1


def test_reserved_values_lie_above_every_job_id():
    assert locks.MIGRATIONS > locks.MAX_JOB_ID
    assert locks.MAINTENANCE_LEADER > locks.MAX_JOB_ID
    assert locks.MIGRATIONS != locks.MAINTENANCE_LEADER


@pytest.mark.parametrize(("namespace", "value"), [(-1, 1), (0x10000, 1), (1, -1), (1, 1 << 48)])
def test_out_of_range_parts_are_refused(namespace, value):
    with pytest.raises(ValueError):
        locks.key(namespace, value)
