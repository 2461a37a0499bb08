"""jobq.store.give_way: a transaction that waits for a lock only so long, rolls back,
lets the traffic queued behind it through, and tries again within a bound."""

import threading
import time

import psycopg
import pytest

from jobq.store.give_way import giving_way

pytestmark = pytest.mark.db


@pytest.fixture
def held_table(empty_database):
    """A table locked by another session's open transaction: (the table's database URL,
    that session)."""
    with psycopg.connect(empty_database, autocommit=True) as setup:
        setup.execute("CREATE TABLE held (n integer)")
    with psycopg.connect(empty_database) as holder:
        holder.execute("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        yield empty_database, holder


def test_work_that_never_gets_its_lock_gives_way_between_tries_then_raises(held_table):
    url, _ = held_table
    gave_way: list[Exception] = []
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            giving_way(conn, lambda: conn.execute("INSERT INTO held VALUES (1)"),
                       wait_ms=50, pause=0.05, within=0.5, on_giving_way=gave_way.append)
        took = time.monotonic() - started
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "0"  # the wait was the transaction's only
    assert 2 <= len(gave_way) <= 5 and all(isinstance(e, psycopg.errors.LockNotAvailable) for e in gave_way)
    assert 0.4 <= took < 5, took  # within the bound, not for as long as the holder stays


def test_work_gets_its_lock_once_the_holder_ends_and_returns_its_result(held_table):
    url, holder = held_table
    gave_way: list[Exception] = []
    threading.Timer(0.4, holder.commit).start()
    with psycopg.connect(url, autocommit=True) as conn:
        inserted = giving_way(conn, lambda: conn.execute("INSERT INTO held VALUES (1) RETURNING n").fetchone(),
                              wait_ms=50, pause=0.05, within=30, on_giving_way=gave_way.append)
        assert inserted == (1,) and conn.execute("SELECT count(*) FROM held").fetchone() == (1,)
    assert gave_way  # it gave way at least once before the holder ended


def test_a_try_inside_an_open_transaction_rolls_back_only_its_savepoint(held_table):
    url, _ = held_table
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE mine (n integer)")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            giving_way(conn, lambda: conn.execute("INSERT INTO held VALUES (1)"), wait_ms=20, pause=0.01, within=0.1)
        conn.execute("INSERT INTO mine VALUES (1)")  # the outer transaction goes on
        assert conn.execute("SELECT count(*) FROM mine").fetchone() == (1,)
