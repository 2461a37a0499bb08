"""Counter slots: applications count in slots 0..15 (backend pid modulo 16), each jobq
session in a slot of its own from 16 up, so a worker never waits on the counter rows of
an application's open transaction, and the counts stay exact."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

import psycopg
import pytest

import jobq
from support.claims import LOCK_BASE, claim, complete, fail
from support.db import THIS_DATABASE_LOCKS
from support.waiting import wait_for
from jobq.jobs import leases
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.session import ClaimSession

pytestmark = pytest.mark.db

APP_SLOTS = 16
MAX_APP_CONNECTIONS = 400  # opened one at a time until every pid % 16 is covered; most are closed at once


@contextlib.contextmanager
def claim_session(database_url: str, worker_id: str) -> Iterator[psycopg.Connection]:
    """A worker's claim session, connected as the worker connects it."""
    session = ClaimSession(
        database_url, worker_id=worker_id, lock_base=LOCK_BASE, stopping=threading.Event(), in_flight=InFlight()
    )
    session.connect()
    try:
        assert session.conn is not None
        yield session.conn
    finally:
        session.close()


def slot_of(conn: psycopg.Connection) -> int:
    """The slot a session's changes are counted in."""
    return conn.execute("SELECT jobq_counter_slot()").fetchone()[0]  # type: ignore[index]


def slot_held(conn: psycopg.Connection, slot: int) -> bool:
    """Whether a session holds ``slot`` (its advisory lock, two-key form)."""
    return conn.execute(
        f"SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND {THIS_DATABASE_LOCKS} "
        "AND objsubid = 2 AND objid = %s)", (slot,)
    ).fetchone()[0]  # type: ignore[index]


def app_slot(conn: psycopg.Connection) -> int:
    """An application session's slot, by definition (before schema 4, every session's)."""
    return conn.execute("SELECT pg_backend_pid() % 16").fetchone()[0]  # type: ignore[index]


@contextlib.contextmanager
def open_enqueue_in_every_app_slot(
    database_url: str, queue: str, job_type: str, payload: dict | None = None
) -> Iterator[list[psycopg.Connection]]:
    """One application connection per slot 0..15, each inside a transaction that enqueued
    a job of ``queue`` and ``type`` and stays open (holding its slot's counter rows) until
    the block ends; then each commits."""
    kept: dict[int, psycopg.Connection] = {}
    try:
        for _ in range(MAX_APP_CONNECTIONS):
            app = psycopg.connect(database_url, application_name="test application")
            slot = app_slot(app)
            if slot in kept:
                app.close()
                continue
            kept[slot] = app
            jobq.enqueue(job_type, payload, queue=queue, conn=app)  # the documented pattern: no commit yet
            if len(kept) == APP_SLOTS:
                break
        assert sorted(kept) == list(range(APP_SLOTS)), f"covered only slots {sorted(kept)}"
        yield list(kept.values())
        for app in kept.values():
            app.commit()
    finally:
        for app in kept.values():
            app.close()


def counted(conn: psycopg.Connection) -> dict[str, dict[tuple[str, str], int]]:
    """What jobq.counts reads from the counters: the depth per (queue, status) and per
    (type, status), and the totals per (type, name)."""
    counts = jobq.counts(conn=conn)

    def nonzero(per: dict[str, dict[str, int]], names: tuple[str, ...]) -> dict[tuple[str, str], int]:
        return {(k, name): n for k, ns in per.items() for name, n in ns.items() if n and name in names}

    return {
        "queues": nonzero(counts.queues, jobq.STATUSES),
        "types": nonzero(counts.types, jobq.STATUSES),
        "totals": nonzero(counts.types, ("enqueued_total", "done_total", "dead_total", "failed_runs_total")),
    }


def actual(conn: psycopg.Connection) -> dict[str, dict[tuple[str, str], int]]:
    """The same, counted over the jobs table (no job is ever deleted in these tests)."""

    def rows(query: str) -> dict[tuple[str, str], int]:
        return {(k, name): n for k, name, n in conn.execute(query) if n}

    return {
        "queues": rows("SELECT queue, status, count(*) FROM jobs GROUP BY queue, status"),
        "types": rows("SELECT type, status, count(*) FROM jobs GROUP BY type, status"),
        "totals": rows(
            "SELECT type, name, sum(n)::bigint FROM jobs, LATERAL (VALUES ('enqueued_total', 1), "
            "('done_total', (status = 'done')::int), ('dead_total', (status = 'dead')::int), "
            "('failed_runs_total', jsonb_array_length(errors))) AS t(name, n) GROUP BY type, name"
        ),
    }


def test_jobq_sessions_take_distinct_slots_from_16_up_and_free_them_on_close(conn, database_url):
    assert slot_of(conn) == app_slot(conn)
    with claim_session(database_url, "a") as a, claim_session(database_url, "b") as b:
        with claim_session(database_url, "c") as c:
            slots = [slot_of(a), slot_of(b), slot_of(c)]
            freed = slots[2]
        assert len(set(slots)) == 3 and min(slots) >= APP_SLOTS
        # The slot is the session's for its life: asking again gives the same one.
        assert a.execute("SELECT jobq_counter_slot_take(%s)", (LOCK_BASE,)).fetchone()[0] == slots[0]
        # c's server process ends after its connection is closed: a CI run's d came first
        assert slot_held(conn, slots[0])  # a's, open: seen
        wait_for(lambda: not slot_held(conn, freed), 10, "the closed session's slot let go")
        with claim_session(database_url, "d") as d:
            assert slot_of(d) <= freed and slot_of(d) not in slots[:2]  # reused, never shared


def test_counters_stay_exact_through_claims_and_outcomes_in_the_new_slots(conn, database_url):
    rng = random.Random(18)
    jobq.enqueue_many(
        [{"type": rng.choice(["noop", "always_fail", "flaky"]), "max_retries": rng.randint(0, 2)} for _ in range(150)],
        conn=conn,
    )
    reclaimed = 0
    with claim_session(database_url, "w1") as w1, claim_session(database_url, "w2") as w2:
        # A worker that had to wait on a counter row would fail here instead of hanging.
        for worker in (w1, w2):
            worker.execute("SET lock_timeout = '5s'")
        with open_enqueue_in_every_app_slot(database_url, "default", "noop"):
            for _ in range(40):
                worker = rng.choice([w1, w2])
                got = claim(worker, rng.randint(0, 10))
                split = rng.randint(0, len(got))
                complete(worker, got[:split])
                fail(worker, got[split:])
                # An event that changes no job row (jobq.store.sql.counters.COUNTER_ADD).
                if got and rng.random() < 0.3:
                    leases.count_events(worker, "reclaimed_total", [(got[0].job.queue, got[0].job.type)])
                    reclaimed += 1
            running = claim(w2, 3)
            leases.start(w2, running, [0.0] * len(running)).result()
            # While the applications' transactions are open: exact, without their jobs.
            assert counted(conn) == actual(conn)
        # After they committed: their sixteen jobs are counted too.
        assert counted(conn) == actual(conn)
        assert jobq.counts(conn=conn).totals.get("reclaimed_total", 0) == reclaimed > 0
        # The workers' changes are in their own slots only, never in the applications'.
        ours = {slot_of(w1), slot_of(w2)}
        worker_slots = {s for (s,) in conn.execute("SELECT DISTINCT slot FROM job_counters WHERE slot >= 16")}
        assert worker_slots == ours


@pytest.mark.chaos
@pytest.mark.daemon
def test_an_open_enqueue_transaction_in_every_slot_does_not_stall_the_workers(conn, database_url, daemon):
    committed, workers = 200, 2
    # Jobs of 20 ms, so that the drain lasts long enough for every worker to take part.
    short = {"sleep_seconds": 0.02}
    jobq.enqueue_many([{"type": "slow", "queue": "stall", "payload": short}] * committed, conn=conn)
    with open_enqueue_in_every_app_slot(database_url, "stall", "slow", short) as apps:
        # Every application slot's counter rows for (stall, slow) are held; each
        # transaction's own job is invisible to the workers until it commits.
        d = daemon(workers, "--queues", "stall")
        wait_for(
            lambda: jobq.counts(conn=conn).queues.get("stall", {}).get("done", 0) == committed,
            20,
            f"{committed} committed jobs done while 16 enqueue transactions stay open",
        )
        assert all(app.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS for app in apps)
        # Every worker recorded outcomes meanwhile: none was stuck behind a counter row.
        ran = conn.execute("SELECT count(DISTINCT worker_id) FROM jobs WHERE status = 'done'").fetchone()[0]
        assert ran == workers
    # Committed now: their jobs wake the workers and run too.
    wait_for(
        lambda: jobq.counts(conn=conn).queues["stall"]["done"] == committed + APP_SLOTS, 15, "the 16 late jobs done"
    )
    assert counted(conn) == actual(conn)
    assert "Traceback" not in d.log()


def test_a_raw_update_moving_jobs_back_changes_depths_and_never_lowers_a_total(conn):
    jobq.enqueue_many([{"type": "a"}] * 3 + [{"type": "b"}] * 2, conn=conn)
    conn.execute("UPDATE jobs SET status = 'done' WHERE type = 'a'")
    conn.execute("UPDATE jobs SET status = 'dead', attempt = 2 WHERE type = 'b'")
    before = jobq.counts(conn=conn).types
    assert (before["a"]["done_total"], before["b"]["dead_total"], before["b"]["failed_runs_total"]) == (3, 2, 6)
    # One statement: two of a's jobs back to pending (backwards), b's dead jobs to done.
    conn.execute(
        "UPDATE jobs SET status = CASE type WHEN 'a' THEN 'pending' ELSE 'done' END, attempt = 0 "
        "WHERE id IN (SELECT id FROM jobs WHERE type = 'a' ORDER BY id LIMIT 2) OR type = 'b'"
    )
    after = jobq.counts(conn=conn).types
    assert (after["a"]["pending"], after["a"]["done"], after["a"]["done_total"]) == (2, 1, 3)
    assert (after["b"]["done"], after["b"].get("dead", 0), after["b"]["done_total"]) == (2, 0, 2)
    assert (after["b"]["dead_total"], after["b"]["failed_runs_total"]) == (2, 6)
