"""Idempotency keys held for a scope (unique_while): what each scope blocks, one
namespace for all of them, enforced by the database under concurrent enqueuers, and a
job coming back to pending whose key another job took meanwhile ends superseded, on
every path that sends a job back."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

import jobq
from support.api import assert_error
from support.claims import LOCK_BASE, claim
from support.db import advisory_locks, rows_read
from support.waiting import wait_for
from support.web_server import WebServer
from jobq.jobs import leases
from jobq.daemon.maintenance import reaper
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.session import ClaimSession
from jobq.settings import Settings

pytestmark = [pytest.mark.db, pytest.mark.schedules]

SCOPES = ("pending", "active", "always")
# Whether a holder in each scope still holds its key in each state it can reach.
HELD = {
    "pending": {"pending": True, "claimed": False, "running": False, "done": False, "dead": False, "cancelled": False},
    "active": {"pending": True, "claimed": True, "running": True, "done": False, "dead": False, "cancelled": False},
    "always": {"pending": True, "claimed": True, "running": True, "done": True, "dead": True, "cancelled": True},
}
SETTINGS = Settings.from_env({}, stale_threshold=30, backoff_base=0.1)
_keys = itertools.count()


def new_key() -> str:
    return f"key-{next(_keys)}"


def put(conn: psycopg.Connection, job_id: int, status: str) -> None:
    conn.execute("UPDATE jobs SET status = %s WHERE id = %s", (status, job_id))


@pytest.fixture
def worker_session(database_url):
    conn = psycopg.connect(database_url, autocommit=True)
    yield conn
    conn.close()


# -- what a key blocks ---------------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
def test_a_key_is_held_while_its_job_is_in_its_scope_and_blocks_newcomers_of_every_scope(ledger, scope):
    for state, held in HELD[scope].items():
        for newcomer_scope in SCOPES:
            key = new_key()
            holder = jobq.enqueue("noop", idempotency_key=key, unique_while=scope, conn=ledger)
            put(ledger, holder.id, state)
            newcomer = jobq.enqueue("noop", idempotency_key=key, unique_while=newcomer_scope, conn=ledger)
            assert (newcomer.id == holder.id) is held, (scope, state, newcomer_scope)
            if not held:
                assert (newcomer.status, newcomer.unique_while) == ("pending", newcomer_scope)


def test_the_default_scope_is_always_and_a_job_shows_its_scope(ledger):
    job = jobq.enqueue("noop", idempotency_key=new_key(), conn=ledger)
    assert jobq.get(job.id, conn=ledger).unique_while == "always"
    put(ledger, job.id, "done")
    assert jobq.enqueue("noop", idempotency_key=job.idempotency_key, conn=ledger).id == job.id


def test_a_batch_returns_holders_for_held_keys_and_inserts_the_rest(ledger):
    held, freed = new_key(), new_key()
    holder = jobq.enqueue("noop", idempotency_key=held, unique_while="active", conn=ledger)
    old = jobq.enqueue("noop", idempotency_key=freed, unique_while="pending", conn=ledger)
    put(ledger, old.id, "done")
    jobs = jobq.enqueue_many(
        [{"type": "noop", "idempotency_key": held, "unique_while": "pending"},
         {"type": "noop"},
         {"type": "noop", "idempotency_key": freed, "unique_while": "pending"}],
        conn=ledger,
    )
    assert jobs[0].id == holder.id
    assert jobs[1].id not in (holder.id, old.id) and jobs[2].id not in (holder.id, old.id)
    assert jobq.get(jobs[2].id, conn=ledger).unique_while == "pending"


def test_a_scope_without_a_key_or_an_unknown_scope_is_refused_naming_the_field(ledger, client):
    with pytest.raises(jobq.InvalidArgument) as without_key:
        jobq.enqueue("noop", unique_while="pending", conn=ledger)
    assert without_key.value.field == "unique_while"
    with pytest.raises(jobq.InvalidArgument) as unknown:
        jobq.enqueue("noop", idempotency_key="k", unique_while="forever", conn=ledger)
    assert unknown.value.field == "unique_while"
    with pytest.raises(jobq.InvalidArgument) as in_batch:
        jobq.enqueue_many([{"type": "noop"}, {"type": "noop", "unique_while": "active"}], conn=ledger)
    assert in_batch.value.field == "jobs[1].unique_while"
    assert "unique_while" in assert_error(client.post("/jobs", json={"type": "noop", "unique_while": "active"}), 400)
    reply = client.post("/jobs", json={"type": "noop", "idempotency_key": "k", "unique_while": "x"})
    assert reply.status_code == 422 and "unique_while" in reply.get_data(as_text=True)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_the_api_takes_a_scope_with_the_header_key(client, ledger):
    headers = {"Idempotency-Key": "refresh-7"}
    first = client.post("/jobs", json={"type": "noop", "unique_while": "pending"}, headers=headers)
    again = client.post("/jobs", json={"type": "noop", "unique_while": "pending"}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["id"] == again.get_json()["id"] and first.get_json()["unique_while"] == "pending"
    put(ledger, first.get_json()["id"], "running")
    third = client.post("/jobs", json={"type": "noop", "unique_while": "pending"}, headers=headers)
    assert third.status_code == 201 and third.get_json()["id"] != first.get_json()["id"]


# -- 8 enqueuers on one key over real HTTP -------------------------------------------------------


def test_eight_concurrent_enqueuers_make_exactly_one_job_per_scope_window(database_url, ledger, tmp_path):
    """Eight clients post one key (scope "pending") as fast as they can, half of them in
    batches with unkeyed jobs, while the test takes the waiting job out of its scope 20
    times: each window has exactly one job, every answer is 200 or 201 with a job of
    the key, and none is lost."""
    key, moves = "debounced-refresh", 20
    web = WebServer(database_url, tmp_path).start()
    stop = threading.Event()

    def post(n: int) -> list[tuple[str, int, int]]:
        seen = []
        while True:
            final = stop.is_set()  # one more round after the last move: the last window gets its job
            if n % 2:
                reply = web.request("POST", "/jobs", {"type": "noop", "idempotency_key": key, "unique_while": "pending"})
                seen.append(("one", reply.status, reply.json()["id"] if reply.status < 300 else 0))
            else:
                body = {"jobs": [{"type": "noop", "queue": "other"},
                                 {"type": "noop", "idempotency_key": key, "unique_while": "pending"}]}
                reply = web.request("POST", "/jobs/batch", body)
                seen.append(("batch", reply.status, reply.json()["jobs"][1]["id"] if reply.status < 300 else 0))
            if final:
                return seen

    def holder() -> int | None:
        row = ledger.execute(
            "SELECT id FROM jobs WHERE idempotency_key = %s AND status = 'pending'", (key,)
        ).fetchone()
        return row[0] if row else None

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(post, n) for n in range(8)]
            moved = []
            for _ in range(moves):
                job_id = wait_for(holder, 30, "a waiting job of the key")
                put(ledger, job_id, "running")  # out of its scope: the next post makes a new one
                moved.append(job_id)
                time.sleep(0.05)
            stop.set()
            answers = [answer for future in futures for answer in future.result()]
    finally:
        web.stop()
    assert {status for _, status, _ in answers} <= {200, 201}, answers
    jobs = ledger.execute("SELECT id, status FROM jobs WHERE idempotency_key = %s ORDER BY id", (key,)).fetchall()
    assert len(jobs) == moves + 1  # one per window
    assert [job_id for job_id, _ in jobs[:-1]] == moved and jobs[-1][1] == "pending"
    ids = {job_id for job_id, _ in jobs}
    assert {job_id for _, _, job_id in answers} == ids  # every answer one of them, each answered
    # A single post answers 201 only for the job it created (a batch answers 201 whatever its rows did).
    created = [job_id for route, status, job_id in answers if route == "one" and status == 201]
    assert len(created) == len(set(created))
    assert ledger.execute("SELECT count(*) FROM jobs WHERE queue = 'other'").fetchone()[0] == sum(
        1 for route, _, _ in answers if route == "batch")  # the batches' unkeyed jobs, each stored once


# -- a job coming back to pending, on each path ---------------------------------------------


def keyed_claim(conn, worker, scope: str = "pending") -> tuple[leases.Claim, jobq.Job]:
    """A job with a key in ``scope``, claimed by ``worker``, and the newcomer that took the
    key while it was out of its scope."""
    key = new_key()
    jobq.enqueue("noop", idempotency_key=key, unique_while=scope, max_retries=3, conn=conn)
    (held,) = claim(worker, 1)
    newcomer = jobq.enqueue("noop", idempotency_key=key, unique_while="pending", queue="newcomers", conn=conn)
    assert newcomer.id != held.job_id
    return held, newcomer


def assert_superseded(conn, job_id: int, by: int) -> None:
    job = jobq.get(job_id, conn=conn)
    assert (job.status, job.error, job.cancelled_by) == ("cancelled", f"superseded by job {by}", "jobq")
    assert jobq.get(by, conn=conn).status == "pending"
    assert job_id not in advisory_locks(conn)


def test_a_retry_whose_key_was_taken_is_superseded_and_the_rest_of_its_batch_is_written(ledger, worker_session):
    held, newcomer = keyed_claim(ledger, worker_session)
    jobq.enqueue_many([{"type": "noop"}, {"type": "noop", "idempotency_key": new_key(), "unique_while": "pending"}],
                      conn=ledger)
    others = claim(worker_session, 2)
    batch = [held, *others]
    failures, rejected = leases.fail(
        worker_session, batch, ["boom"] * 3, [0.0] * 3, [0.0] * 3, lock_base=LOCK_BASE
    ).result()
    assert rejected == set()
    assert {f.job_id: f.status for f in failures} == {held.job_id: "cancelled", **{c.job_id: "pending" for c in others}}
    assert_superseded(ledger, held.job_id, newcomer.id)
    for other in others:
        assert (jobq.get(other.job_id, conn=ledger).status, jobq.get(other.job_id, conn=ledger).attempt) == ("pending", 1)


def test_a_snooze_whose_key_was_taken_is_superseded(ledger, worker_session):
    held, newcomer = keyed_claim(ledger, worker_session)
    assert leases.snooze(worker_session, [held], [5.0], lock_base=LOCK_BASE).result() == set()
    assert_superseded(ledger, held.job_id, newcomer.id)


def test_a_give_back_whose_key_was_taken_is_superseded(ledger, worker_session):
    held, newcomer = keyed_claim(ledger, worker_session)
    assert leases.release(worker_session, [held], lock_base=LOCK_BASE).result() == set()
    assert_superseded(ledger, held.job_id, newcomer.id)


def test_an_orphan_released_after_a_reconnect_whose_key_was_taken_is_superseded(ledger, worker_session):
    held, newcomer = keyed_claim(ledger, worker_session)
    assert leases.release_orphans(ledger, "test", []) == [held.job_id]
    assert jobq.get(held.job_id, conn=ledger).status == "cancelled"


@pytest.mark.reaper
@pytest.mark.parametrize("started", [False, True], ids=["claimed-released", "running-retried"])
def test_a_reclaim_whose_key_was_taken_is_superseded(ledger, database_url, started):
    worker = psycopg.connect(database_url, autocommit=True)
    held, newcomer = keyed_claim(ledger, worker)
    if started:
        leases.start(worker, [held], [0.0]).result()
    worker.close()  # the worker's session ends, and its locks with it
    wait_for(lambda: held.job_id not in advisory_locks(ledger), 10, "the worker's lock gone")
    ledger.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 minute'")
    recovered = reaper.reap_stale(ledger, SETTINGS, LOCK_BASE)
    assert recovered.superseded == (1 if started else 0)
    assert_superseded(ledger, held.job_id, newcomer.id)


def test_a_dead_job_put_back_by_hand_whose_key_was_taken_is_superseded(ledger):
    key = new_key()
    dead = jobq.enqueue("noop", idempotency_key=key, unique_while="active", conn=ledger)
    put(ledger, dead.id, "dead")
    newcomer = jobq.enqueue("noop", idempotency_key=key, unique_while="active", conn=ledger)
    put(ledger, dead.id, "pending")  # what an operator does with SQL
    assert_superseded(ledger, dead.id, newcomer.id)


def test_a_job_whose_scope_it_never_left_comes_back_to_pending(ledger, worker_session):
    jobq.enqueue("noop", idempotency_key=new_key(), unique_while="active", conn=ledger)
    (held,) = claim(worker_session, 1)
    assert leases.release(worker_session, [held], lock_base=LOCK_BASE).result() == set()
    assert jobq.get(held.job_id, conn=ledger).status == "pending"


def test_a_key_taken_by_an_insert_still_uncommitted_when_the_retry_is_written(ledger, database_url):
    """The newcomer's insert has not committed when the worker's write looks for a
    holder: the write waits for it, fails on the key once it commits, and the worker's
    session sends it again: the job ends superseded, its batch-mate is written, and no
    lock is left."""
    stopping, in_flight = threading.Event(), InFlight()
    session = ClaimSession(
        database_url, worker_id="test:1:race", lock_base=LOCK_BASE, stopping=stopping, in_flight=in_flight
    )
    session.connect()
    key = new_key()
    jobq.enqueue("noop", idempotency_key=key, unique_while="pending", conn=ledger)
    jobq.enqueue("noop", conn=ledger)
    held = session.run(lambda conn, _: leases.claim(
        conn, ["default"], worker_id="test:1:race", limit=2, lock_base=LOCK_BASE).result())
    in_flight.hold(held)
    with psycopg.connect(database_url) as app:  # the application's transaction, left open
        newcomer = jobq.enqueue("noop", idempotency_key=key, unique_while="pending", conn=app)
        result: dict = {}
        writer = threading.Thread(target=lambda: result.update(written=session.run(lambda conn, _: leases.fail(
            conn, held, ["boom", "boom"], [0.0, 0.0], [0.0, 0.0], lock_base=LOCK_BASE).result())))
        writer.start()
        wait_for(lambda: ledger.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'jobq worker test:1:race%%' "
            "AND wait_event_type = 'Lock' AND datname = current_database()").fetchone(), 10,
            "the write waiting for the uncommitted insert")
        app.commit()
    writer.join(10)
    assert not writer.is_alive()
    failures, rejected = result["written"]
    by_id = {f.job_id: f.status for f in failures}
    keyed, plain = sorted(held, key=lambda c: c.job.idempotency_key is None)
    assert rejected == set() and by_id == {keyed.job_id: "cancelled", plain.job_id: "pending"}
    assert_superseded(ledger, keyed.job_id, newcomer.id)
    assert advisory_locks(ledger) == {}
    session.close()


def test_a_retrys_key_check_reads_by_key_after_plans_made_on_an_empty_queue(ledger, worker_session):
    """The supersede trigger's look-up of a key's holder (schema 34): a worker session
    whose first retries met an empty, analysed-empty queue keeps generic plans made for
    an empty table; with 5,000 keyed jobs in the queue since, a retry's write reads the
    key's holder through the key's index, not every live job (the kept plan read them
    all, a sequential scan: 25-44 ms a retry at 200,000)."""
    ledger.execute("ANALYZE jobs_live")

    def retry(key: str) -> int:
        jobq.enqueue("noop", idempotency_key=key, unique_while="pending", queue="retries", conn=ledger)
        (claimed,) = leases.claim(worker_session, ["retries"], worker_id="t:1:w", limit=1, lock_base=0).result()
        with worker_session.transaction():
            before = rows_read(worker_session)
            leases.fail(worker_session, [claimed], ["boom"], [0.0], [0.0], lock_base=0).result()
            return rows_read(worker_session) - before

    for i in range(10):  # the session's generic plans, made while the queue is empty (from the 6th call on)
        retry(f"early-{i}")
    jobq.enqueue_many([{"type": "noop", "idempotency_key": f"backlog-{i}"} for i in range(5_000)], conn=ledger)
    assert retry("late") <= 100
