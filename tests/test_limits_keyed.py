"""The claim under rules on keys (migration 0025): what each key has left is counted for
the keys whose locks the claim holds, through the slots' key index (never by reading
every slot row, dead ones included); a key with some left is read again by a later pass
or queue of the same claim; starts are recorded only where a rate applies."""

from __future__ import annotations

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.limits import claims as limited
from support.claims import LOCK_BASE, complete_freeing_slots
from support.db import scalar

pytestmark = [pytest.mark.db, pytest.mark.limits]

SLOTS_READ = (
    "SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'jobq_limit_slots'"
)


@pytest.fixture
def session(database_url):
    """A claim session of its own (its advisory locks are the jobs it holds)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def claim(conn, *, worker: str = "w", limit: int = 50, queues=("default",)) -> list[leases.Claim]:
    return limited.claim(conn, list(queues), worker_id=worker, limit=limit, lock_base=LOCK_BASE).result()


def slot_reads(conn: psycopg.Connection, claimer: psycopg.Connection) -> tuple[int, int]:
    """(sequential scans, index scans) of jobq_limit_slots so far, the claimer's included."""
    claimer.execute("SELECT pg_stat_force_next_flush()")
    claimer.execute("SELECT 1")  # its counts are flushed at the end of a statement
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(SLOTS_READ).fetchone()


def test_a_claim_under_key_rules_reads_slots_by_their_key_index_never_every_slot_row(conn, session):
    """A slot row is inserted and deleted per job, and autovacuum comes by once a minute:
    a count that read the whole table read every dead slot of the drain so far."""
    jobq.set_limit("tenant:*", concurrency=1, conn=conn)
    jobq.enqueue_many([{"type": "noop", "concurrency_key": f"tenant:{i % 20}"} for i in range(100)], conn=conn)
    whole = by_index = 0
    for _ in range(3):
        before = slot_reads(conn, session)
        taken = claim(session)
        after = slot_reads(conn, session)
        whole, by_index = whole + after[0] - before[0], by_index + after[1] - before[1]
        assert len(taken) == 20  # one job of each key
        complete_freeing_slots(session, taken)
    assert whole == 0, "a claim under key rules read jobq_limit_slots whole"
    assert by_index >= 3


def test_a_fair_claim_reads_a_key_with_some_left_again_in_its_next_pass(conn, session):
    jobq.set_queue_limits("default", fair=True, conn=conn)
    jobq.set_limit("two", concurrency=2, conn=conn)
    jobq.set_limit("one", concurrency=1, conn=conn)
    jobq.enqueue_many([{"type": "noop", "concurrency_key": k} for k in ("two", "one") * 4], conn=conn)
    taken = claim(session)
    keys = sorted(c.job.concurrency_key for c in taken)
    assert keys == ["one", "two", "two"]
    assert claim(session, worker="x") == []  # both keys full
    assert scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 3


def test_a_key_with_some_left_after_one_queue_is_taken_in_the_next_queue_of_the_claim(conn, session):
    jobq.set_limit("k", concurrency=2, conn=conn)
    jobq.enqueue_many([{"type": "noop", "queue": q, "concurrency_key": "k"} for q in ("a", "b", "b")], conn=conn)
    taken = claim(session, queues=("a", "b"))
    assert sorted(c.job.queue for c in taken) == ["a", "b"]
    jobq.set_limit("k", concurrency=1, conn=conn)
    complete_freeing_slots(session, taken)
    assert [c.job.queue for c in claim(session, queues=("a", "b"))] == ["b"]


def test_starts_are_recorded_only_where_a_rate_applies(conn, session):
    jobq.set_limit("plain:*", concurrency=1, conn=conn)
    jobq.set_limit("rated:*", rate="100/m", conn=conn)
    jobq.enqueue_many([{"type": "noop", "concurrency_key": f"{k}:{i}"} for k in ("plain", "rated") for i in range(3)],
                      conn=conn)
    taken = claim(session)
    assert len(taken) == 6
    starts = conn.execute("SELECT scope, n FROM jobq_limit_starts ORDER BY scope").fetchall()
    assert starts == [("key rated:0", 1), ("key rated:1", 1), ("key rated:2", 1)]
