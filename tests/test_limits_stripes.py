"""A queue's concurrency limit in stripes (migration 0023): claims of a queue whose limit
does not bind no longer wait for each other's commit, and the limit stays exact when
claims decide at once in different stripes, when it is lowered, and when slots taken
without a stripe (under a rule on keys, before the queue had a limit) are held."""

from __future__ import annotations

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.limits.gate import KEYED_CLAIM, Gate
from support.claims import LOCK_BASE, complete_freeing_slots
from support.db import scalar

pytestmark = [pytest.mark.db, pytest.mark.limits]


@pytest.fixture
def sessions(database_url):
    """Claim sessions of their own, each of them a worker holding what it claims."""
    opened = []

    def session() -> psycopg.Connection:
        conn = psycopg.connect(database_url, autocommit=True)
        opened.append(conn)
        return conn

    yield session
    for conn in opened:
        conn.close()


def claim(conn, *, worker: str, limit: int = 50) -> list[leases.Claim]:
    return limited.claim(conn, ["default"], worker_id=worker, limit=limit, lock_base=LOCK_BASE).result()


def test_claims_under_a_queue_limit_that_does_not_bind_do_not_wait_for_each_other(conn, sessions):
    """A's claim is not committed yet; B's claim of the same queue answers at once (a
    wait for any lock would fail it: lock_timeout), with other jobs than A's."""
    jobq.enqueue_many([{"type": "noop"}] * 40, conn=conn)
    jobq.set_queue_limits("default", concurrency=1000, conn=conn)
    a, b = sessions(), sessions()
    b.execute("SET lock_timeout = '2s'")
    with a.transaction():
        first = claim(a, worker="a", limit=10)
        with b.transaction():
            second = claim(b, worker="b", limit=10)
    assert len(first) == len(second) == 10
    assert not {c.job_id for c in first} & {c.job_id for c in second}
    assert scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 20


def test_claims_deciding_at_once_in_different_stripes_take_no_more_than_the_limit(conn, sessions):
    """A limit of 20 is 16 stripes (2 places in the first four, 1 in the others): two
    claims open at the same time take places in stripes of their own (the second all
    but those of the stripes the first holds, which may keep one place unused), never
    more than 20 in all; once they commit, a third takes what is left, then what an
    outcome frees."""
    jobq.enqueue_many([{"type": "noop"}] * 60, conn=conn)
    jobq.set_queue_limits("default", concurrency=20, conn=conn)
    a, b, c = sessions(), sessions(), sessions()
    with a.transaction():
        first = claim(a, worker="a", limit=5)
        with b.transaction():
            second = claim(b, worker="b", limit=50)
    assert len(first) == 5 and 14 <= len(second) <= 15
    assert len(claim(c, worker="c")) == 20 - 5 - len(second)
    stripes = conn.execute("SELECT stripe, count(*) FROM jobq_limit_slots GROUP BY stripe").fetchall()
    assert len(stripes) == 16 and all(n == (2 if s < 4 else 1) for s, n in stripes)
    assert claim(c, worker="c") == []
    complete_freeing_slots(a, first)
    assert len(claim(c, worker="c")) == 5
    assert scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 20


def test_a_lowered_queue_limit_starts_nothing_until_its_slots_are_under_it(conn, sessions):
    jobq.enqueue_many([{"type": "noop"}] * 60, conn=conn)
    jobq.set_queue_limits("default", concurrency=32, conn=conn)
    a = sessions()
    held = claim(a, worker="a")
    assert len(held) == 32
    jobq.set_queue_limits("default", concurrency=16, conn=conn)
    complete_freeing_slots(a, held[:16])
    assert claim(a, worker="a") == []  # 16 in use: the limit, in stripes that were free
    complete_freeing_slots(a, held[16:17])
    assert len(claim(a, worker="a")) == 1


def test_slots_taken_without_a_stripe_count_whole_when_the_queue_gets_a_limit(conn, sessions):
    """Jobs claimed under a rule on keys while their queue had no limit hold slots of no
    stripe; once the queue is limited to 4, a claim counts them all and takes one."""
    jobq.enqueue_many([{"type": "noop", "concurrency_key": f"tenant:{i}"} for i in range(3)], conn=conn)
    jobq.set_limit("tenant:*", concurrency=5, conn=conn)
    a = sessions()
    keyed = claim(a, worker="a")
    assert len(keyed) == 3 and scalar(conn, "SELECT count(*) FROM jobq_limit_slots WHERE stripe IS NULL") == 3
    jobq.enqueue_many([{"type": "noop"}] * 10, conn=conn)
    jobq.set_queue_limits("default", concurrency=4, conn=conn)
    assert len(claim(a, worker="a")) == 1
    complete_freeing_slots(a, keyed)
    assert len(claim(a, worker="a")) == 3


def test_a_claim_of_a_limited_queue_and_one_without_limits_takes_from_both(conn, sessions):
    """No rule on keys: each queue's jobs are claimed by one statement, the limited
    queue's as many as its places, the other's (no row in jobq_queues) all of them,
    without slots."""
    jobq.enqueue_many([{"type": "noop"}] * 5 + [{"type": "noop", "queue": "other"}] * 3, conn=conn)
    jobq.set_queue_limits("default", concurrency=2, conn=conn)
    taken = limited.claim(sessions(), ["default", "other"], worker_id="a", limit=50, lock_base=LOCK_BASE).result()
    assert sorted((c.job.queue, c.slotted) for c in taken) == [("default", True)] * 2 + [("other", False)] * 3


class _Session:
    """What Gate.claim_for asks of a worker's claim session: ``run(fn)`` on its connection."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def run(self, call):
        return call(self.conn, False)


def test_while_a_rule_on_keys_exists_a_claim_under_limits_takes_at_most_keyed_claim(conn, sessions):
    """Claims of up to 500 would let one worker take every key's free slot: with a rule
    on keys, a claim under limits takes KEYED_CLAIM; with a queue limit alone, what it asks."""
    jobq.enqueue_many([{"type": "noop", "concurrency_key": f"k:{i}"} for i in range(120)], conn=conn)
    jobq.set_queue_limits("default", concurrency=1000, conn=conn)
    session = sessions()
    gate = Gate(every=0)
    take = gate.claim_for(_Session(session), ["default"])
    assert gate.limited and not gate.keyed
    assert len(take(session, ["default"], worker_id="a", limit=60, lock_base=LOCK_BASE).result()) == 60
    jobq.set_limit("k:*", concurrency=1, conn=conn)
    take = gate.claim_for(_Session(session), ["default"])
    assert gate.limited and gate.keyed and KEYED_CLAIM == 50
    assert len(take(session, ["default"], worker_id="b", limit=500, lock_base=LOCK_BASE).result()) == KEYED_CLAIM


def test_a_worker_asks_when_a_full_rate_opens_only_while_one_of_its_queues_has_a_rate(conn, sessions):
    session = sessions()
    jobq.enqueue_many([{"type": "noop"}] * 3, conn=conn)
    jobq.set_queue_limits("default", concurrency=5, conn=conn)
    gate = Gate(every=0)
    take = gate.claim_for(_Session(session), ["default"])
    assert gate.limited and not gate.rated and take.keywords["rate_opens_in"] is None
    jobq.set_queue_limits("default", rate="1/m", conn=conn)
    take = gate.claim_for(_Session(session), ["default"])
    assert gate.rated
    assert len(take(session, ["default"], worker_id="a", limit=5, lock_base=LOCK_BASE).result()) == 1
    assert take(session, ["default"], worker_id="a", limit=5, lock_base=LOCK_BASE).result() == []
    assert 0 < gate.rate_opens_in <= 60  # type: ignore[operator]
    jobq.set_queue_limits("default", rate=None, conn=conn)
    gate.claim_for(_Session(session), ["default"])
    assert not gate.rated and gate.rate_opens_in is None
