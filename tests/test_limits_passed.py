"""A key passed on (schema 30): the claim in the transaction of some outcomes is given the
claims whose slots they free, and passes each slot of a key on to the key's next due job
in the same queue, claimed first, without deciding the key again; where passing would be
wrong (a rate, a limit lowered, a queue with limits of its own, paused, or not the
worker's) the slot is only freed and the claim of schema 25 decides."""

from __future__ import annotations


import pytest

import jobq
from jobq.jobs import leases, queues
from jobq.limits import claims as limited
from support.claims import claim_under_limits, complete, keyed
from support.db import scalar

pytestmark = [pytest.mark.db, pytest.mark.limits]

SLOTS = "SELECT job_id, lease FROM jobq_limit_slots ORDER BY job_id"


def complete_and_claim(conn, held: list[leases.Claim], **kwargs) -> list[leases.Claim]:
    """A worker's exchange: the outcomes of ``held`` (done) and its next claim, given the
    slots they free, in one transaction."""
    with conn.transaction():
        complete(conn, held)
        return claim_under_limits(conn, freed=limited.slotted(held), **kwargs)


def test_a_key_freed_by_an_outcome_passes_to_its_next_job_ahead_of_earlier_jobs(conn, two_sessions):
    """k1 is held; its outcome passes k1's slot to k2, claimed first, though m (another
    key's, enqueued before k2) comes first in claim order; m is claimed after it, by the
    claim of what is left. The key keeps one slot, under k2's claim."""
    a, _ = two_sessions
    jobq.set_limit("k", concurrency=1, conn=conn)
    jobq.set_limit("m", concurrency=1, conn=conn)
    k1, m, k2, k3 = keyed(conn, "k", "m", "k", "k")
    first = claim_under_limits(a, limit=1)
    assert [c.job_id for c in first] == [k1]
    taken = complete_and_claim(a, first, limit=2)
    assert [c.job_id for c in taken] == [k2, m]
    assert all(c.slotted for c in taken)
    assert conn.execute(SLOTS).fetchall() == sorted((c.job_id, c.lease) for c in taken)
    assert scalar(conn, "SELECT status FROM jobs WHERE id = %s", k3) == "pending"


def test_a_passed_key_is_never_free_to_another_claim_before_or_after_the_commit(conn, two_sessions):
    a, b = two_sessions
    jobq.set_limit("k", concurrency=1, conn=conn)
    k1, k2, _ = keyed(conn, "k", "k", "k")
    held = claim_under_limits(a)
    assert [c.job_id for c in held] == [k1]
    with a.transaction():
        complete(a, held)
        passed = claim_under_limits(a, freed=limited.slotted(held))
        assert [c.job_id for c in passed] == [k2]
        assert claim_under_limits(b, worker="b") == []  # the outcome and the pass not committed yet
    assert claim_under_limits(b, worker="b") == []  # committed: k2 holds the key


def test_a_key_whose_slots_are_above_a_lowered_limit_passes_nothing_on(conn, two_sessions):
    """Two of k's jobs run at concurrency 2; the rule drops to 1: their outcomes pass
    neither slot on, and the claim of what is left takes one job of k (running jobs
    finished first)."""
    a, _ = two_sessions
    jobq.set_limit("k", concurrency=2, conn=conn)
    keyed(conn, *["k"] * 5)
    held = claim_under_limits(a)
    assert len(held) == 2
    jobq.set_limit("k", concurrency=1, conn=conn)
    taken = complete_and_claim(a, held)
    assert len(taken) == 1
    assert scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 1


@pytest.mark.parametrize("setup", ["rate on the key", "queue paused", "queue fair", "queue rate", "queue concurrency"])
def test_a_slot_is_only_freed_where_passing_it_on_would_skip_what_the_claim_decides(conn, two_sessions, setup):
    """k1 is held, m (another key's) comes before k2 in claim order. In each case k1's
    outcome frees its slot without passing it on, so the claim of two more jobs takes m
    and k2 in claim order, as the claim of schema 25 decides (which records a rate's
    starts, takes a fair queue's turns, counts the queue's slots; passed on, k2 would
    come first), or nothing from a paused queue."""
    a, _ = two_sessions
    jobq.set_limit("k", concurrency=1, rate="100/m" if setup == "rate on the key" else None, conn=conn)
    jobq.set_limit("m", concurrency=1, conn=conn)
    option = {"queue fair": {"fair": True}, "queue rate": {"rate": "1000/m"}, "queue concurrency": {"concurrency": 10}}
    if setup in option:
        jobq.set_queue_limits("default", **option[setup], conn=conn)
    k1, m, k2 = keyed(conn, "k", "m", "k")
    held = claim_under_limits(a, limit=1)
    assert [c.job_id for c in held] == [k1]
    if setup == "queue paused":
        queues.pause("default", conn=conn)
    taken = complete_and_claim(a, held, limit=2)
    assert [c.job_id for c in taken] == ([] if setup == "queue paused" else [m, k2])
    if setup == "rate on the key":
        assert scalar(conn, "SELECT sum(n) FROM jobq_limit_starts WHERE scope = 'key k'") == 2


def test_a_worker_passes_nothing_on_in_a_queue_it_no_longer_serves(conn, two_sessions):
    a, _ = two_sessions
    jobq.set_limit("k", concurrency=1, conn=conn)
    _, k2 = keyed(conn, "k", "k")
    held = claim_under_limits(a)
    assert complete_and_claim(a, held, queues=("elsewhere",)) == []
    assert scalar(conn, "SELECT status FROM jobs WHERE id = %s", k2) == "pending"
    assert scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 0


@pytest.mark.unit
def test_a_worker_passes_keys_on_for_pass_for_seconds_then_claims_looking_at_every_due_job(monkeypatch):
    from jobq.limits import gate as gates

    now = [100.0]
    monkeypatch.setattr(gates.time, "monotonic", lambda: now[0])
    gate = gates.Gate()
    gate.limited = gate.keyed = True
    gate.checked = now[0]  # the cached answer is fresh: no session needed
    passes = []
    for step in (0.0, 0.03, 0.03, 0.05, 0.03):
        now[0] += step
        passes.append(gate.claim_for(None, ["default"]).keywords["pass_on"])
    assert passes == [False, True, True, False, True]  # a whole claim at 100.0, then at 100.11
    gate.keyed = False  # a queue limit only: no key to pass on
    assert gate.claim_for(None, ["default"]).keywords["pass_on"] is False


def test_a_claim_looks_past_due_jobs_whose_keys_are_all_full(conn, two_sessions):
    """The first 200 due jobs are all of 50 keys another worker holds; the free keys' jobs
    come after them. The claim's first pass takes nothing, its next reads past those keys
    and takes the free keys' jobs (schema 30; before, it took nothing until the held keys'
    backlog had drained)."""
    a, b = two_sessions
    jobq.set_limit("t*", concurrency=1, conn=conn)
    keyed(conn, *[f"t{i}" for i in range(50)] * 5)  # 250 due jobs, 5 of each held key
    free = keyed(conn, *[f"tfree{i}" for i in range(10)])
    assert len(claim_under_limits(b, worker="b")) == 50  # one job of each t0..t49: every one of those keys held
    taken = claim_under_limits(a)
    assert sorted(c.job_id for c in taken) == free
