"""Flow control against real supervisors: the number of runs at once per queue and per
key never above its limit, whatever the number of hosts, and after workers are killed
(kill -9); a short seeded property test of that invariant (its long version, with a
PostgreSQL restart, is under the chaos marker in test_limits_chaos.py)."""

from __future__ import annotations

import random
import time

import psycopg
import pytest

import jobq
from support import spans
from support.claims import claim_under_limits, keyed
from support.daemon import alive, worker_pids
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.limits]

DONE = "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'"


def span_jobs(conn, rng: random.Random, n: int, queues: list[str], keys: list[str | None], seconds=(0.02, 0.08)):
    rows = [
        {
            "type": "span",
            "queue": rng.choice(queues),
            "concurrency_key": rng.choice(keys),
            "payload": {"seconds": round(rng.uniform(*seconds), 3)},
        }
        for _ in range(n)
    ]
    return jobq.enqueue_many(rows, conn=conn)


def test_two_supervisors_never_run_more_than_the_queue_and_key_limits(conn, daemon):
    spans.create(conn)
    rng = random.Random(32)
    jobq.set_queue_limits("default", concurrency=3, conn=conn)
    jobq.set_limit("tenant:*", concurrency=1, conn=conn)
    jobs = span_jobs(conn, rng, 80, ["default"], ["tenant:1", "tenant:2", "tenant:3", None], (0.03, 0.06))
    for _ in range(2):
        daemon(3, JOBQ_CLAIM_BATCH="50")
    ids = [j.id for j in jobs]
    wait_for(lambda: scalar(conn, DONE, ids) == len(ids), 60, "every job done")
    by_queue, by_key = spans.max_overlap(conn, "queue"), spans.max_overlap(conn, "concurrency_key")
    assert by_queue == {"default": 3}  # reached, never passed
    assert by_key == {"tenant:1": 1, "tenant:2": 1, "tenant:3": 1}
    assert scalar(conn, "SELECT count(*) FROM test_spans") == len(ids)  # each ran once
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 0, 10, "every slot freed")


def test_a_limit_set_at_runtime_binds_within_a_second_and_a_held_job_starts_when_a_slot_frees(conn, daemon):
    spans.create(conn)
    daemon(4)
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workers") == 4, 20, "four workers")
    jobq.set_queue_limits("default", concurrency=1, conn=conn)
    time.sleep(1.5)  # the workers' gates ask at most once a second
    at = scalar(conn, "SELECT clock_timestamp()")
    jobs = jobq.enqueue_many([{"type": "span", "payload": {"seconds": 0.2}}] * 6, conn=conn)
    ids = [j.id for j in jobs]
    wait_for(lambda: scalar(conn, DONE, ids) == len(ids), 30, "every job done")
    assert spans.max_overlap(conn, "queue") == {"default": 1}
    # one at a time, each started soon after the one before ended: idle workers with due
    # jobs held back look again within 0.4 s, not after the poll interval (5 s)
    elapsed = scalar(conn, "SELECT extract(epoch FROM max(ended) - %s::timestamptz) FROM test_spans", at)
    assert elapsed < 6 * 0.2 + 3.0


@pytest.mark.parametrize("seed", [1])
def test_property_no_limit_exceeded_nothing_lost_across_kill_9_of_workers(conn, daemon, seed):
    """Seeded randomised limits per queue and per key, three supervisors, workers killed
    (SIGKILL) at random moments: at no instant more runs of a queue or key than its
    limit, every job done, each outcome once."""
    spans.create(conn)
    rng = random.Random(seed)
    queue_limits = {"q1": rng.randint(2, 4), "q2": None}
    rule_limits = {"tenant:*": rng.randint(1, 2), "vip": 1}
    for queue, limit in queue_limits.items():
        if limit:
            jobq.set_queue_limits(queue, concurrency=limit, conn=conn)
    for pattern, limit in rule_limits.items():
        jobq.set_limit(pattern, concurrency=limit, conn=conn)
    keys = [f"tenant:{i}" for i in range(4)] + ["vip", "free", None]
    jobs = span_jobs(conn, rng, 120, list(queue_limits), keys)
    for _ in range(3):
        daemon(2, JOBQ_QUEUES="q1,q2", JOBQ_CLAIM_BATCH=str(rng.choice([1, 10, 50])))
    ids = [j.id for j in jobs]
    for _ in range(2):
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM test_spans WHERE ended IS NULL") > 0, 30, "a run")
        time.sleep(rng.uniform(0.0, 0.05))
        pid = rng.choice(worker_pids(conn))
        if alive(pid):
            spans.kill(conn, pid)
    wait_for(lambda: scalar(conn, DONE, ids) == len(ids), 90, "every job done")
    assert not spans.outlived(conn), "slots freed while their holder still ran"
    by_queue, by_key = spans.max_overlap(conn, "queue"), spans.max_overlap(conn, "concurrency_key")
    assert by_queue["q1"] <= queue_limits["q1"]
    for key, most in by_key.items():
        limit = rule_limits["vip"] if key == "vip" else rule_limits["tenant:*"] if key.startswith("tenant:") else None
        assert limit is None or most <= limit, (key, most, limit)
    assert jobq.counts(conn=conn).totals.get("done_total", 0) == len(ids)  # each outcome once
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobq_limit_slots") == 0, 30, "every slot freed")


def test_a_cancelled_running_job_keeps_its_slot_until_its_run_ends(conn, daemon):
    """Queue at concurrency 1: A is cancelled 0.2 s into its run and its handler cleans up
    for 1 s more (within JOBQ_CANCEL_GRACE); B, waiting, starts only after A's run has
    ended (the slot goes with the run, not with the cancel's commit)."""
    spans.create(conn)
    jobq.set_queue_limits("default", concurrency=1, conn=conn)
    a = jobq.enqueue("span", {"seconds": 30, "linger": 1.0}, conn=conn)
    b = jobq.enqueue("span", {"seconds": 0.05}, conn=conn)
    daemon(2)
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM test_spans WHERE job_id = %s", a.id) == 1, 30, "A running")
    time.sleep(0.2)
    jobq.cancel(a.id, conn=conn)
    wait_for(lambda: scalar(conn, DONE, [b.id]) == 1, 30, "B done")
    assert jobq.get(a.id, conn=conn).status == "cancelled"
    a_ran, b_waited = conn.execute(
        "SELECT extract(epoch FROM a.ended - a.started), b.started >= a.ended FROM test_spans AS a, test_spans AS b "
        "WHERE a.job_id = %s AND b.job_id = %s", (a.id, b.id)).fetchone()
    assert a_ran >= 1.2 and b_waited, (a_ran, b_waited)
    assert not spans.outlived(conn)


def test_a_workflow_step_obeys_its_keys_limit_like_any_job(conn, daemon):
    """Four steps released together by one parent, all under key wf:1 (rule wf:* = 1),
    four workers: they run one at a time; the steps carry the key given to wf.add."""
    spans.create(conn)
    jobq.set_limit("wf:*", concurrency=1, conn=conn)
    wf = jobq.Workflow(name="limited")
    first = wf.add("span", {"seconds": 0.05}, concurrency_key="wf:1")
    for _ in range(4):
        wf.add("span", {"seconds": 0.15}, after=[first], concurrency_key="wf:1")
    run = wf.enqueue(conn=conn)
    assert {job.concurrency_key for job in run.jobs.values()} == {"wf:1"}
    daemon(4)
    ids = [job.id for job in run.jobs.values()]
    wait_for(lambda: scalar(conn, DONE, ids) == len(ids), 30, "every step done")
    assert spans.max_overlap(conn, "concurrency_key") == {"wf:1": 1}


WINDOW_MOST = (
    "SELECT max((SELECT count(*) FROM jobs AS b WHERE b.id = ANY(%(ids)s) "
    "AND b.claimed_at >= a.claimed_at AND b.claimed_at < a.claimed_at + make_interval(secs => 1))) "
    "FROM jobs AS a WHERE a.id = ANY(%(ids)s)"
)


# The scale (50/s drained for 20 s) runs under the chaos marker; a smaller one by default.
@pytest.mark.parametrize("rate, seconds", [(30, 4), pytest.param(50, 20, marks=pytest.mark.chaos)])
def test_a_rate_limited_queue_starts_at_most_n_in_any_second_across_two_supervisors(conn, daemon, rate, seconds):
    """N/s drained for S s by two supervisors: in every one-second window (sliding, from
    each claim) at most N starts, and within 5 % of N x S starts in the S seconds from
    the first; no attempt and no snooze spent by the jobs held back."""
    jobq.set_queue_limits("default", rate=f"{rate}/s", conn=conn)
    jobs = jobq.enqueue_many([{"type": "noop"}] * (rate * (seconds + 1)), conn=conn)
    ids = [j.id for j in jobs]
    for _ in range(2):
        daemon(2, JOBQ_CLAIM_BATCH="50")
    wait_for(lambda: scalar(conn, DONE, ids) == len(ids), seconds + 30, "every job done")
    assert conn.execute(WINDOW_MOST, {"ids": ids}).fetchone()[0] == rate
    started = conn.execute("SELECT count(*) FROM jobs WHERE id = ANY(%(ids)s) AND claimed_at < (SELECT min(claimed_at) "
                           "FROM jobs WHERE id = ANY(%(ids)s)) + make_interval(secs => %(s)s)",
                           {"ids": ids, "s": seconds}).fetchone()[0]
    print(f"{rate}/s for {seconds} s: {started} starts ({started / seconds:.1f}/s)")
    assert abs(started - rate * seconds) <= 0.05 * rate * seconds, started
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND (attempt, snoozes) <> (0, 0)", ids) == 0


# The scale (a backlog of 20,000, B's 100, W = 8) under the chaos marker.
@pytest.mark.parametrize("backlog, late, supervisors", [(3000, 50, 2), pytest.param(20_000, 100, 4, marks=pytest.mark.chaos)])
def test_a_fair_queue_starts_a_late_keys_jobs_before_the_backlog_of_another(conn, daemon, backlog, late, supervisors):
    """Key A's backlog, then key B's jobs of the same priority, W = 2 x supervisors: every
    B job claimed before A has had 4 x as many more claims (strict priority-then-age
    would run all of A first)."""
    jobq.set_queue_limits("default", fair=True, conn=conn)
    for start in range(0, backlog, 10_000):
        jobq.enqueue_many([{"type": "noop", "concurrency_key": "A"}] * min(10_000, backlog - start), conn=conn)
    for _ in range(supervisors):
        daemon(2, JOBQ_CLAIM_BATCH="50")
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'done'") >= 300, 60, "A under way")
    b = [j.id for j in jobq.enqueue_many([{"type": "noop", "concurrency_key": "B"}] * late, conn=conn)]
    enqueued = scalar(conn, "SELECT max(created_at) FROM jobs WHERE id = ANY(%s)", b)
    wait_for(lambda: scalar(conn, DONE, b) == len(b), 60, "B done")
    last_b = scalar(conn, "SELECT max(claimed_at) FROM jobs WHERE id = ANY(%s)", b)
    a_meanwhile = scalar(
        conn, "SELECT count(*) FROM jobs WHERE concurrency_key = 'A' AND claimed_at > %s AND claimed_at <= %s",
        enqueued, last_b,
    )
    print(f"A {backlog}, B {late}, W = {2 * supervisors}: A started {a_meanwhile} while B's started")
    assert a_meanwhile <= 4 * len(b), a_meanwhile


CLAIMS_UNDER_LIMITS = (
    "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'jobq_claim_limited'"
)


def test_idle_workers_answer_the_notifications_of_jobs_their_keys_hold_back_with_few_claims(conn, database_url, daemon):
    # A claim under rules on keys that finds every due job held back re-decides each key it
    # reads (8.8 ms with 1,000 keys held), and each notification of a new job woke an idle
    # worker to make one: one claim a notification, 1.2 cores of PostgreSQL's for 100
    # enqueues a second. A worker whose last claim took nothing now claims again, when
    # woken, no sooner than nine times that claim's duration after it.
    keys = 1000
    jobq.set_limit("held:*", concurrency=1, conn=conn)
    held_keys = [f"held:{i}" for i in range(keys)]
    keyed(conn, *held_keys)
    with psycopg.connect(database_url, autocommit=True) as holder:
        held = claim_under_limits(holder, worker="holder", limit=keys)
        assert len(held) == keys  # every key's one slot held by this session's claims
        keyed(conn, *held_keys * 10)  # ten due jobs behind each: a claim reads its first 200, then walks the keys
        before = scalar(conn, CLAIMS_UNDER_LIMITS)
        workers = daemon(2, PGOPTIONS="-c track_functions=all")  # every claim of theirs counted
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workers") == 2, 20, "two workers")
        time.sleep(1.5)  # their gates have seen the rule, their first claims taken nothing
        notified = 400
        started = time.monotonic()
        for i in range(notified):  # 160 a second, each alone: a notification each
            jobq.enqueue("noop", concurrency_key=f"held:{i}", conn=conn)
            time.sleep(max(0.0, started + (i + 1) / 160 - time.monotonic()))
        free = jobq.enqueue("noop", concurrency_key="held:new", conn=conn)  # a key with its slot free
        wait_for(lambda: jobq.get(free.id, conn=conn).status == "done", 15, "the free key's job done")
        workers.stop()  # their statistics reach the server as their sessions end
        time.sleep(1.0)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        claims = scalar(conn, CLAIMS_UNDER_LIMITS) - before
    assert claims < 0.6 * notified, claims
