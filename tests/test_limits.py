"""Flow control: rules on keys and queue limits stored, listed and audited; the claim
under limits taking no more than the free slots and rates; and the limits holding
across two real supervisors."""

from __future__ import annotations

import psycopg
import pytest

import jobq
from jobq.errors import InvalidArgument
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.limits.rates import Rate, parse_rate
from jobq.store import locks
from support.claims import complete_freeing_slots
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.limits]



@pytest.fixture
def lock_base():
    from jobq.settings import Settings

    return locks.key(Settings.from_env({}).advisory_namespace, 0)


@pytest.fixture
def session(database_url):
    """A claim session of its own (its advisory locks are the jobs it holds)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def claim(conn, lock_base, queues=("default",), limit=50) -> list[leases.Claim]:
    return limited.claim(conn, list(queues), worker_id="test", limit=limit, lock_base=lock_base).result()




@pytest.mark.unit
@pytest.mark.parametrize("text, rate", [("100/m", Rate(100, 60)), ("50/s", Rate(50, 1)), (" 3 / h ", Rate(3, 3600))])
def test_parse_rate_reads_n_per_period(text, rate):
    assert parse_rate(text) == rate and str(rate) == text.replace(" ", "")


@pytest.mark.unit
@pytest.mark.parametrize("bad", ["100", "0/s", "1/d", "x/m", 5, "1000001/s"])
def test_parse_rate_refuses_what_it_cannot_read_naming_the_field(bad):
    with pytest.raises(InvalidArgument) as raised:
        parse_rate(bad, "rules.rate")
    assert raised.value.field == "rules.rate"


def test_rules_are_stored_listed_audited_and_cleared(conn):
    jobq.set_limit("tenant:*", concurrency=2, conn=conn)
    jobq.set_limit("tenant:42", concurrency=1, rate="10/m", conn=conn)
    listed = {rule.pattern: rule for rule in jobq.list_limits(conn=conn)}
    assert (listed["tenant:*"].concurrency, listed["tenant:*"].rate) == (2, None)
    assert (listed["tenant:42"].concurrency, str(listed["tenant:42"].rate)) == (1, "10/m")
    jobq.set_limit("tenant:*", rate="5/s", conn=conn)  # replaced whole: no concurrency now
    assert [r.concurrency for r in jobq.list_limits(conn=conn) if r.pattern == "tenant:*"] == [None]
    assert jobq.clear_limit("tenant:42", conn=conn) is True
    assert jobq.clear_limit("tenant:42", conn=conn) is False
    assert [r.pattern for r in jobq.list_limits(conn=conn)] == ["tenant:*"]
    actions = [a for (a,) in conn.execute("SELECT action FROM jobq_audit ORDER BY id")]
    assert actions == ["set_limit", "set_limit", "set_limit", "clear_limit", "clear_limit"]


@pytest.mark.parametrize(
    "kwargs, field",
    [({"concurrency": 0}, "concurrency"), ({"concurrency": True}, "concurrency"), ({"rate": "fast"}, "rate"), ({}, "concurrency")],
)
def test_a_bad_rule_is_refused_naming_the_field(conn, kwargs, field):
    with pytest.raises(InvalidArgument) as raised:
        jobq.set_limit("tenant:*", conn=conn, **kwargs)
    assert raised.value.field == field
    with pytest.raises(InvalidArgument) as raised:
        jobq.set_limit("a*b", concurrency=1, conn=conn)
    assert raised.value.field == "pattern"


def test_queue_limits_change_only_what_is_given_and_none_removes(conn):
    limits = jobq.set_queue_limits("mail", concurrency=5, conn=conn)
    assert (limits.concurrency, limits.rate, limits.fair) == (5, None, False)
    limits = jobq.set_queue_limits("mail", rate="100/m", conn=conn)
    assert (limits.concurrency, str(limits.rate)) == (5, "100/m")
    limits = jobq.set_queue_limits("mail", concurrency=None, conn=conn)
    assert (limits.concurrency, str(limits.rate)) == (None, "100/m")
    assert [q.queue for q in jobq.queue_limits(conn=conn)] == ["mail"]
    assert scalar(conn, "SELECT count(*) FROM jobq_audit WHERE action = 'set_queue_limits'") == 3


def test_a_claim_of_fifty_takes_only_the_free_slots_of_its_queue(conn, session, lock_base):
    jobq.enqueue_many([{"type": "noop"}] * 20, conn=conn)
    jobq.set_queue_limits("default", concurrency=3, conn=conn)
    first = claim(session, lock_base)
    assert len(first) == 3 and all(c.slotted and c.locked for c in first)
    assert claim(session, lock_base) == []  # all 3 slots taken
    complete_freeing_slots(session, first[:2])
    assert len(claim(session, lock_base)) == 2
    assert [q.in_use for q in jobq.queue_limits(conn=conn)] == [3]


def test_each_key_under_a_prefix_rule_has_its_own_limit_and_an_exact_rule_wins(conn, session, lock_base):
    jobs = [{"type": "noop", "concurrency_key": key} for key in ["tenant:1"] * 5 + ["tenant:2"] * 5 + ["other"] * 3]
    jobq.enqueue_many(jobs + [{"type": "noop"}] * 2, conn=conn)
    jobq.set_limit("tenant:*", concurrency=2, conn=conn)
    jobq.set_limit("tenant:2", concurrency=1, conn=conn)
    taken = claim(session, lock_base)
    keys = sorted(c.job.concurrency_key or "-" for c in taken)
    assert keys == ["-", "-"] + ["other"] * 3 + ["tenant:1"] * 2 + ["tenant:2"]
    listed = {rule.pattern: rule for rule in jobq.list_limits(conn=conn)}
    assert (listed["tenant:*"].in_use, listed["tenant:*"].keys, listed["tenant:*"].held) == (2, 1, 3)
    assert (listed["tenant:2"].in_use, listed["tenant:2"].held) == (1, 4)


def test_a_rate_limited_queue_starts_no_more_than_n_in_a_period(conn, session, lock_base):
    jobq.enqueue_many([{"type": "noop"}] * 10, conn=conn)
    jobq.set_queue_limits("default", rate="4/h", conn=conn)
    first = claim(session, lock_base)
    complete_freeing_slots(session, first)
    assert len(first) == 4 and not any(c.slotted for c in first)
    assert claim(session, lock_base) == []  # the hour's four starts are spent
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'pending' AND attempt = 0 AND snoozes = 0") == 6


def test_a_slot_whose_holder_is_gone_is_swept_but_not_one_still_held(conn, database_url, lock_base):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    jobq.set_queue_limits("default", concurrency=1, conn=conn)
    with psycopg.connect(database_url, autocommit=True) as holder:
        (held,) = claim(holder, lock_base)
        jobq.cancel(held.job.id, conn=conn)  # the operator's cancel: its run goes on
        assert limited.sweep_slots(conn, lock_base) == 0  # its lock is held: the slot stays
        assert claim(conn, lock_base) == []
    # the holder's session is gone: its slot is freed by the sweep, not before
    wait_for(lambda: limited.sweep_slots(conn, lock_base) == 1, 10, "the slot to be swept")
    assert len(claim(conn, lock_base)) == 1


def test_the_cli_sets_lists_and_clears_limits_and_refuses_bad_values_in_one_line(conn, database_url):
    from support.cli import run_cli

    assert run_cli("limits", "set", "tenant:*", "--concurrency", "2", DATABASE_URL=database_url).returncode == 0
    limited = run_cli("queues", "limit", "mail", "--concurrency", "5", "--rate", "100/m", DATABASE_URL=database_url)
    assert limited.returncode == 0 and "concurrency 5, rate 100/m" in limited.stdout
    listed = run_cli("limits", "list", "--json", DATABASE_URL=database_url)
    assert listed.returncode == 0
    import json

    data = json.loads(listed.stdout)
    assert [r["pattern"] for r in data["rules"]] == ["tenant:*"] and [q["queue"] for q in data["queues"]] == ["mail"]
    removed = run_cli("queues", "limit", "mail", "--concurrency", "none", DATABASE_URL=database_url)
    assert "concurrency -, rate 100/m" in removed.stdout
    bad = run_cli("queues", "limit", "mail", "--rate", "often", DATABASE_URL=database_url)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "rate" in bad.stderr
    assert "cleared" in run_cli("limits", "clear", "tenant:*", DATABASE_URL=database_url).stdout
    assert scalar(conn, "SELECT count(*) FROM jobq_audit WHERE actor LIKE 'cli:%%'") == 4


def test_a_fair_queue_takes_turns_between_keys_and_the_jobs_without_one(conn, session, lock_base):
    jobq.enqueue_many([{"type": "noop", "concurrency_key": "a"}] * 20, conn=conn)  # a's backlog first
    jobq.enqueue_many([{"type": "noop", "concurrency_key": k} for k in ("c", "b", "c", "b")] + [{"type": "noop"}] * 2,
                      conn=conn)
    jobq.set_queue_limits("default", fair=True, conn=conn)
    turns = [[c.job.concurrency_key for c in claim(session, lock_base, limit=4)] for _ in range(3)]
    assert turns == [[None, "a", "b", "c"], [None, "a", "b", "c"], ["a", "a", "a", "a"]]  # then a alone
    assert len(claim(session, lock_base, limit=50)) == 10  # a fair queue's claim takes ten at most


def test_debounce_moves_the_pending_job_and_a_claimed_one_starts_a_new_job(conn, session, lock_base):
    first = jobq.enqueue("noop", {"v": 1}, idempotency_key="sync:42", debounce=30, debounce_max_wait=45, conn=conn)
    assert first.unique_while == "pending" and 29 < (first.run_at - first.created_at).total_seconds() <= 30
    conn.execute("UPDATE jobs SET created_at = created_at - interval '20 seconds' WHERE id = %s", (first.id,))
    again = jobq.enqueue("noop", {"v": 2}, idempotency_key="sync:42", debounce=30, debounce_max_wait=45, conn=conn)
    assert again.id == first.id and again.payload == {"v": 2}
    assert abs((again.run_at - again.created_at).total_seconds() - 45) < 0.5  # capped at the max wait
    conn.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (first.id,))
    (claimed,) = leases.claim(session, ["default"], worker_id="t", limit=5, lock_base=lock_base).result()
    assert claimed.job.id == first.id
    new = jobq.enqueue("noop", {"v": 3}, idempotency_key="sync:42", debounce=30, conn=conn)
    assert new.id != first.id and new.status == "pending"


def test_a_debounce_longer_than_its_max_wait_makes_the_first_job_due_at_the_max_wait(conn):
    job = jobq.enqueue("noop", idempotency_key="sync:9", debounce=30, debounce_max_wait=10, conn=conn)
    assert abs((job.run_at - job.created_at).total_seconds() - 10) < 0.5
    again = jobq.enqueue("noop", {"v": 2}, idempotency_key="sync:9", debounce=30, debounce_max_wait=10, conn=conn)
    assert again.id == job.id and again.run_at == job.run_at  # still capped from its first enqueue


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"idempotency_key": "k", "debounce": 5, "unique_while": "always"}, "unique_while"),
        ({"idempotency_key": "k", "debounce_max_wait": 5}, "debounce_max_wait"),
        ({"idempotency_key": "k", "debounce": 0}, "debounce"),
        ({"idempotency_key": "k", "debounce": "5"}, "debounce"),
        ({"debounce": 5}, "debounce"),
    ],
)
def test_a_bad_debounce_is_refused_naming_the_field(conn, kwargs, field):
    with pytest.raises(InvalidArgument) as raised:
        jobq.enqueue("noop", conn=conn, **kwargs)
    assert raised.value.field == field


def test_debounce_over_http_answers_201_then_200_with_the_same_job(client, conn):
    body = {"type": "noop", "idempotency_key": "sync:7", "debounce": 30}
    first = client.post("/jobs", json={**body, "payload": {"v": 1}})
    second = client.post("/jobs", json={**body, "payload": {"v": 2}})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.get_json()["id"] == first.get_json()["id"] and second.get_json()["payload"] == {"v": 2}
    batch = client.post("/jobs/batch", json={"jobs": [{**body, "payload": {"v": 3}}, {"type": "noop"}]})
    assert batch.status_code == 201 and batch.get_json()["jobs"][0]["id"] == first.get_json()["id"]
    bad = client.post("/jobs", json={**body, "unique_while": "active"})
    assert bad.status_code == 422 and "unique_while" in bad.get_data(as_text=True)
    assert jobq.enqueue_many([{**body, "payload": {"v": 4}}], conn=conn)[0].payload == {"v": 4}


@pytest.mark.unit
def test_an_idle_worker_looks_at_held_jobs_less_often_after_each_empty_claim_under_limits():
    from jobq.limits.gate import HELD_RECHECK_MAX, Gate

    gate = Gate()
    gate.claimed(0)
    assert gate.recheck_after(0.05) == 0.05  # no limit: the plain claim's recheck, always
    gate.limited = True
    waits = []
    for _ in range(6):
        gate.claimed(0)
        waits.append(gate.recheck_after(0.05))
    assert waits == [0.1, 0.2, HELD_RECHECK_MAX, HELD_RECHECK_MAX, HELD_RECHECK_MAX, HELD_RECHECK_MAX]
    gate.claimed(3)
    assert gate.recheck_after(0.05) == 0.05
    gate.claimed(0)
    gate.rate_opens_in = 0.02  # a full rate's window opens sooner than the backoff: then
    assert gate.recheck_after(0.05) == 0.02


@pytest.mark.unit
def test_an_idle_worker_woken_for_jobs_its_keys_hold_back_waits_nine_times_its_empty_claim():
    from jobq.limits.gate import HELD_RECHECK_MAX, HELD_WAKE_MIN, Gate

    gate = Gate()
    gate.claimed(0, 0.01)
    assert gate.held_wake_gap() == 0.0  # no limit: woken, it claims at once
    gate.limited = True
    gate.claimed(0, 0.01)
    assert gate.held_wake_gap() == 0.0  # limits but no rule on keys: its claims are cheap
    gate.keyed = True
    gate.claimed(0, 0.01)
    assert 0.05 < gate.held_wake_gap() <= 0.09  # nine times 10 ms after that claim
    gate.claimed(0, 0.001)
    assert 0.0 < gate.held_wake_gap() <= HELD_WAKE_MIN  # never less than that after it
    gate.claimed(0, 1.0)
    assert HELD_RECHECK_MAX - 0.1 < gate.held_wake_gap() <= HELD_RECHECK_MAX
    gate.claimed(5, 0.01)
    assert gate.held_wake_gap() == 0.0  # a claim that took jobs: the next wake-up claims at once
