"""A job handed to a waiting worker by its enqueue (schema 28): claimed for the worker in
the enqueue's transaction, the worker told on the hand-off channel; which enqueues may
do it; the worker's flag; and the jobs handed to a worker that never heard of them."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import jobq
from jobq.jobs import leases, queues
from jobq.store.sql.enqueue import JOB_INSERT_HANDED
from jobq.jobs.params import row_params
from jobq.spec import parse_spec
from support.daemon import worker_pids
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.once]

LOCK_BASE = 1 << 40
WAITING = "w:1:waiting"


def waiting_worker(conn, worker_id: str = WAITING, *, queues=("default",), every: bool = False, since: float = 1.0):
    """A worker's row that says it waits for a hand-off since ``since`` seconds ago."""
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, queues, all_queues, waiting_since) "
        "VALUES (%s, 'w', 1, %s, %s, now() - make_interval(secs => %s))",
        (worker_id, [] if every else list(queues), every, since),
    )


def waiting_since(conn, worker_id: str = WAITING):
    return scalar(conn, "SELECT waiting_since FROM workers WHERE id = %s", worker_id)


def hand_channel(conn) -> str:
    return scalar(conn, "SELECT jobq_hand_channel()")


def test_a_job_enqueued_while_a_worker_waits_goes_in_claimed_for_it_and_the_worker_is_told(conn, database_url):
    waiting_worker(conn)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{hand_channel(conn)}"')
        job = jobq.enqueue("noop", {"n": 1}, conn=conn)
        notes = [note.payload for note in listener.notifies(timeout=2, stop_after=1)]
    assert (job.status, job.worker_id) == ("claimed", WAITING)
    assert job == jobq.get(job.id, conn=conn)  # the Job returned is the row, claimed_at and lease included
    assert job.claimed_at == job.created_at  # claimed in the enqueue's own transaction
    assert notes == [f"{job.id} {job.lease} {WAITING}"]
    assert waiting_since(conn) is None  # one job a wait: the next enqueue goes in pending
    assert jobq.enqueue("noop", conn=conn).status == "pending"


def test_the_worker_waiting_longest_is_handed_the_job_and_a_worker_of_every_queue_any(conn):
    waiting_worker(conn, "w:1:recent", since=1)
    waiting_worker(conn, "w:2:longest", since=5)
    waiting_worker(conn, "w:3:every", every=True, since=0.5)
    assert [jobq.enqueue("noop", conn=conn).worker_id for _ in range(3)] == ["w:2:longest", "w:1:recent", "w:3:every"]
    waiting_worker(conn, "w:4:every", every=True)
    assert jobq.enqueue("noop", queue="elsewhere", conn=conn).worker_id == "w:4:every"


@pytest.mark.parametrize(
    "case",
    ["due later", "a concurrency key", "a paused queue", "a queue with a concurrency limit", "a fair queue",
     "jobq.notify off", "a queue the worker does not serve", "a caller's transaction"],
)
def test_a_job_that_may_not_be_handed_over_goes_in_pending_and_the_worker_still_waits(conn, case):
    waiting_worker(conn)
    options: dict = {}
    if case == "due later":
        options["run_at"] = datetime.now(timezone.utc) + timedelta(minutes=5)
    elif case == "a concurrency key":
        options["concurrency_key"] = "tenant:1"
    elif case == "a paused queue":
        queues.pause("default", conn=conn)
    elif case == "a queue with a concurrency limit":
        jobq.set_queue_limits("default", concurrency=5, conn=conn)
    elif case == "a fair queue":
        jobq.set_queue_limits("default", fair=True, conn=conn)
    elif case == "jobq.notify off":
        conn.execute("SET jobq.notify = off")
    elif case == "a queue the worker does not serve":
        options["queue"] = "other"
    if case == "a caller's transaction":
        with conn.transaction():
            job = jobq.enqueue("noop", conn=conn)
    else:
        job = jobq.enqueue("noop", conn=conn, **options)
    assert (job.status, job.worker_id, job.lease) == ("pending", None, None)
    assert jobq.get(job.id, conn=conn).status == "pending"
    assert waiting_since(conn) is not None


def test_two_enqueues_at_once_hand_a_waiting_worker_one_job(conn, database_url):
    """The second enqueue skips the worker the first one holds (SKIP LOCKED): it neither
    waits for that transaction nor hands the worker a second job."""
    waiting_worker(conn)
    spec = parse_spec({"type": "noop"})
    with psycopg.connect(database_url) as first:
        handed = first.execute(JOB_INSERT_HANDED, row_params(spec.row())).fetchone()
        assert handed[4] == WAITING  # not committed yet: the worker's row is locked
        second = jobq.enqueue("noop", conn=conn)
        assert second.status == "pending"
        first.commit()
    assert waiting_since(conn) is None
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE worker_id = %s", WAITING) == 1


def test_a_claim_that_finds_nothing_says_the_worker_waits_and_one_that_claims_says_it_no_longer_does(conn):
    conn.execute("INSERT INTO workers (id, hostname, pid, queues) VALUES (%s, 'w', 1, '{default}')", (WAITING,))

    def claim(hand_off: bool = True) -> list:
        return leases.claim(conn, ["default"], worker_id=WAITING, limit=10, lock_base=LOCK_BASE, hand_off=hand_off).result()

    assert claim(hand_off=False) == [] and waiting_since(conn) is None  # a worker that takes no hand-offs
    assert claim() == []
    since = waiting_since(conn)
    assert since is not None
    assert claim() == [] and waiting_since(conn) == since  # still waiting: its row not written again
    conn.execute("UPDATE workers SET waiting_since = NULL WHERE id = %s", (WAITING,))
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)  # pending: enqueue_many never hands over
    conn.execute("UPDATE workers SET waiting_since = now() WHERE id = %s", (WAITING,))
    assert len(claim()) == 2
    assert waiting_since(conn) is None


def test_a_worker_takes_what_was_handed_to_it_by_id_and_lease_and_what_it_never_heard_of(conn):
    waiting_worker(conn)
    first = jobq.enqueue("noop", conn=conn)
    conn.execute("UPDATE workers SET waiting_since = now() WHERE id = %s", (WAITING,))
    second = jobq.enqueue("noop", conn=conn)
    assert first.worker_id == second.worker_id == WAITING

    def take(handed, unheard=None) -> list[int]:
        claims = leases.take_handed(conn, handed, worker_id=WAITING, lock_base=LOCK_BASE, unheard=unheard).result()
        return [c.job_id for c in claims if c.locked]

    assert take([(first.id, first.lease + 1000)]) == []  # another lease: not this hand-off
    assert take([(first.id, first.lease)]) == [first.id]
    assert take([], unheard=[first.id]) == [second.id]  # handed while it could not hear
    assert take([], unheard=[first.id, second.id]) == []
    conn.execute("SELECT pg_advisory_unlock_all()")


def wait_until_waiting(conn, n: int) -> list[str]:
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM workers WHERE waiting_since IS NOT NULL") == n,
             15, f"{n} workers waiting for a hand-off")
    return [row[0] for row in conn.execute("SELECT id FROM workers ORDER BY waiting_since")]


@pytest.mark.daemon
def test_an_idle_worker_of_the_daemon_is_handed_a_job_and_runs_it(conn, daemon):
    daemon(2, JOBQ_POLL_INTERVAL="10")
    waiting = wait_until_waiting(conn, 2)
    job = jobq.enqueue("noop", conn=conn)
    assert job.worker_id == waiting[0]
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 5, "the handed job done")
    done = jobq.get(job.id, conn=conn)
    assert (done.worker_id, done.attempt, done.claimed_at) == (waiting[0], 0, done.created_at)
    assert (done.started_at - done.created_at).total_seconds() < 0.5  # the notification, not the 10 s poll
    wait_until_waiting(conn, 2)  # and back to waiting, each


@pytest.mark.daemon
def test_a_wake_up_heard_beside_a_hand_off_is_not_left_waiting_for_the_handed_job(conn, database_url, daemon):
    """A job handed over and a pending job committed together: the worker handed the first
    also claims the second when the wake-up is its to take, so that the pending job never
    waits for the handed one's run (it goes back to the queue once that run is long, as
    any job in line does)."""
    daemon(2, JOBQ_POLL_INTERVAL="10")
    wait_until_waiting(conn, 2)
    # The worker started first (the lowest slot: the one a wake-up for one job goes to)
    # is the one waiting longest: handed the job, and the one the wake-up is for.
    conn.execute("UPDATE workers SET waiting_since = now() - interval '1 hour' "
                 "WHERE id = (SELECT id FROM workers ORDER BY started_at, pid LIMIT 1)")
    with psycopg.connect(database_url) as both:
        handed = both.execute(JOB_INSERT_HANDED, row_params(parse_spec(
            {"type": "timed_sleep", "payload": {"seconds": 3}}).row())).fetchone()
        assert handed[4] is not None
        pending = jobq.enqueue("noop", conn=both)
        both.commit()
    wait_for(lambda: jobq.get(pending.id, conn=conn).status == "done", 2, "the pending job done while the other sleeps")
    assert jobq.get(handed[0], conn=conn).status in ("claimed", "running")


@pytest.mark.daemon
def test_a_worker_finds_a_job_handed_while_it_could_not_hear_after_its_next_poll(conn, daemon):
    daemon(1, JOBQ_POLL_INTERVAL="1")
    (worker,) = wait_until_waiting(conn, 1)
    conn.execute(  # a hand-off whose notification was lost
        "WITH w AS (UPDATE workers SET waiting_since = NULL WHERE id = %(w)s) "
        "INSERT INTO jobs (type, payload, status, worker_id, lease, claimed_at, heartbeat_at) "
        "VALUES ('noop', '{}', 'claimed', %(w)s, nextval('jobs_lease_seq'), now(), now())", {"w": worker},
    )
    job_id = scalar(conn, "SELECT max(id) FROM jobs")
    wait_for(lambda: jobq.get(job_id, conn=conn).status == "done", 10, "the unheard job done")
    assert (jobq.get(job_id, conn=conn).worker_id, jobq.get(job_id, conn=conn).attempt) == (worker, 0)


@pytest.mark.daemon
def test_a_worker_leaving_gives_back_a_job_handed_to_it_that_it_had_not_taken(conn, daemon):
    d = daemon(1, JOBQ_POLL_INTERVAL="30")
    wait_until_waiting(conn, 1)
    # A worker's first wait opens its listening connection and ends there, and it then
    # looks for jobs handed while it could not hear (it would take the one below and run
    # it: once in CI, its connection came after that row). After one hand-off heard, its
    # waits end only by a notification, the 30 s poll or the stop.
    warm = jobq.enqueue("noop", conn=conn)
    wait_for(lambda: jobq.get(warm.id, conn=conn).status == "done", 10, "a first job handed and done")
    (worker,) = wait_until_waiting(conn, 1)
    conn.execute(
        "INSERT INTO jobs (type, payload, status, worker_id, lease, claimed_at, heartbeat_at) "
        "VALUES ('noop', '{}', 'claimed', %(w)s, nextval('jobs_lease_seq'), now(), now())", {"w": worker},
    )
    job_id = scalar(conn, "SELECT max(id) FROM jobs")
    d.signal(signal.SIGTERM)
    assert d.wait(15) == 0
    left = jobq.get(job_id, conn=conn)
    assert (left.status, left.started_at, left.attempt) == ("pending", None, 0)
    assert worker_pids(conn) == []


@pytest.mark.daemon
def test_a_job_handed_to_a_worker_killed_before_it_read_it_is_run_once_by_another(conn, ledger, daemon):
    daemon(1, JOBQ_POLL_INTERVAL="10")
    (worker,) = wait_until_waiting(conn, 1)
    pid = scalar(conn, "SELECT pid FROM workers WHERE id = %s", worker)
    os.kill(pid, signal.SIGSTOP)  # hears nothing from now on
    try:
        job = jobq.enqueue("ledger", conn=conn)
        assert job.worker_id == worker
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 20, "the job done by the next worker")
    done = jobq.get(job.id, conn=conn)
    assert done.worker_id != worker
    assert scalar(conn, "SELECT count(*) FROM test_ledger WHERE job_id = %s", job.id) == 1


@pytest.mark.daemon
def test_a_worker_told_not_to_take_hand_offs_claims_every_job(conn, daemon):
    daemon(1, JOBQ_POLL_INTERVAL="10", JOBQ_HAND_OFF="0")
    wait_for(lambda: len(worker_pids(conn)) == 1, 15, "the worker up")
    time.sleep(0.5)  # idle, listening
    assert scalar(conn, "SELECT count(*) FROM workers WHERE waiting_since IS NOT NULL") == 0
    job = jobq.enqueue("noop", conn=conn)
    assert job.status == "pending"
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 5, "the job done")
    assert jobq.get(job.id, conn=conn).claimed_at > job.created_at
