"""What a claim under rules on keys reads of jobs_live (schema 33): a bounded number of
rows, whatever one key's backlog and whatever the planner believed of the table when the
session made its plans. Counted by PostgreSQL itself (pg_stat_xact_user_tables: rows
read by sequential scans, and rows fetched through indexes, by this transaction), around
the claim alone."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.limits import claims as limited
from support.claims import claim_under_limits, complete, keyed
from support.db import rows_read

pytestmark = [pytest.mark.db, pytest.mark.limits]

BACKLOG = 5_000  # due jobs of one key in front; a claim that reads past them reads thousands of rows
READ_BOUND = 1_000  # rows a claim may read: its first 200 candidates, probes of keys and ids, with room
NO_SLOT = SimpleNamespace(job_id=0, lease=0, locked=False, slotted=True)  # freed: a slot that is not there


def read_by(conn: psycopg.Connection, action: Callable[[], list[leases.Claim]]) -> tuple[list[leases.Claim], int]:
    """``action()`` in the caller's transaction, and the rows of jobs_live it read."""
    before = rows_read(conn)
    result = action()
    return result, rows_read(conn) - before


def planned_on_an_empty_queue(conn: psycopg.Connection, session: psycopg.Connection) -> None:
    """jobs_live analysed while empty (as autovacuum does once a drain has emptied it),
    then enough claims of ``session`` on the empty queue, both kinds, for PostgreSQL to
    keep a generic plan of each statement (from the sixth call on)."""
    conn.execute("ANALYZE jobs_live")
    for _ in range(10):
        claim_under_limits(session)
        with session.transaction():
            claim_under_limits(session, freed=[NO_SLOT])


def test_a_claim_behind_one_keys_long_backlog_walks_the_keys_instead_of_reading_it(conn, two_sessions):
    """Key a's 5,000 due jobs come first and a's slot is held; b's job comes last: the
    claim takes b's job, reading past a's backlog by probes of the keys' index, not row by
    row (schema 30 read every one of a's jobs, twice)."""
    a, b = two_sessions
    jobq.set_limit("*", concurrency=1, conn=conn)
    keyed(conn, *["a"] * BACKLOG)
    (b_job,) = keyed(conn, "b")
    assert [c.job.concurrency_key for c in claim_under_limits(b, worker="b")] == ["a"]  # a pass that took something ends
    with a.transaction():
        taken, read = read_by(a, lambda: claim_under_limits(a))
    assert [c.job_id for c in taken] == [b_job]
    assert read <= READ_BOUND


def test_a_key_passed_on_behind_another_keys_long_backlog_is_found_by_its_index(conn, two_sessions):
    """b's next job comes after a's 5,000: the claim that passes b's slot on finds it
    through jobs_pending_key_idx, whatever plan the session kept from an empty queue."""
    a, b = two_sessions
    jobq.set_limit("*", concurrency=1, conn=conn)
    planned_on_an_empty_queue(conn, a)
    keyed(conn, *["a"] * BACKLOG)
    b_first, b_next = keyed(conn, "b", "b")
    held = claim_under_limits(a) + claim_under_limits(a)  # a's first job, then b's (the second claim walks past a's backlog)
    assert [c.job.concurrency_key for c in held] == ["a", "b"] and held[1].job_id == b_first
    assert claim_under_limits(b, worker="b") == []  # every key held by a
    with a.transaction():
        complete(a, held)
        passed, read = read_by(a, lambda: claim_under_limits(a, freed=limited.slotted(held)))
    assert b_next in [c.job_id for c in passed]
    assert read <= READ_BOUND


def test_a_claim_planned_on_an_empty_queue_reads_the_first_due_jobs_of_a_backlog_not_all(conn, two_sessions):
    """A worker idle on an analysed-empty queue keeps generic plans made for an empty
    table; a backlog of 5,000 jobs of 100 keys arrives: its claim still reads a range of
    the claim index (schema 30's kept plan read all 5,000, a sequential scan and a sort)."""
    a, _ = two_sessions
    jobq.set_limit("t*", concurrency=1, conn=conn)
    planned_on_an_empty_queue(conn, a)
    keyed(conn, *[f"t{i % 100}" for i in range(BACKLOG)])
    with a.transaction():
        taken, read = read_by(a, lambda: claim_under_limits(a))
    assert len(taken) == 50
    assert read <= READ_BOUND


def test_a_free_key_behind_a_thousand_full_ones_in_key_order_is_found_within_a_few_claims(conn, two_sessions):
    """1,000 keys at concurrency 1, each one's slot held (session a) with ten due jobs
    behind it, and one job of a free key, last in key order. Schema 33's claim read its
    first 200 due jobs, then walked the same first keys at every claim: the free key's job
    was never taken, however often idle workers claimed. Schema 36's walk goes on from
    where the session's last one stopped."""
    a, b = two_sessions
    keys = 1000
    jobq.set_limit("k:*", concurrency=1, conn=conn)
    keyed(conn, *[f"k:{i:04d}" for i in range(keys)])
    assert len(claim_under_limits(a, limit=keys)) == keys
    keyed(conn, *[f"k:{i % keys:04d}" for i in range(10 * keys)])
    (free,) = keyed(conn, "k:zzzz")
    claims = 0
    taken: list[leases.Claim] = []
    while not taken and claims < 8:  # each walks 200 keys on: the free one within five
        taken = claim_under_limits(b, worker="b")
        claims += 1
    assert [c.job_id for c in taken] == [free], claims
