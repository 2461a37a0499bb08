"""Dead letters grouped by cause, from real failures: the signature normalises numbers,
the count follows replays and discards, and the read never scans the letters."""

from __future__ import annotations

import json

import pytest

import jobq
from jobq.store.sql.dead_letters import DEAD_LETTER_GROUP_LIST_WAITING
from jobq.jobs import dead_letters
from jobq.errors import InvalidArgument
from support.claims import drain
from support.cli import run_cli

pytestmark = [pytest.mark.db, pytest.mark.dlq, pytest.mark.control]


@jobq.register("order_lookup")
def order_lookup(job: jobq.Job) -> None:
    n = job.payload["n"]
    if job.payload.get("broken"):
        raise LookupError(f"order {n} not found")
    raise ValueError(f"order {n} not found")


def die(conn, *payloads: dict) -> None:
    jobq.enqueue_many([{"type": "order_lookup", "payload": p, "max_retries": 0} for p in payloads], conn=conn)
    drain(conn)


def test_failures_that_differ_only_in_numbers_are_one_group(conn):
    die(conn, {"n": 17}, {"n": 4017}, {"n": 99})
    (group,) = dead_letters.groups(conn=conn)
    assert (group.type, group.signature, group.count) == ("order_lookup", "ValueError: order <n> not found", 3)
    letters = jobq.list_dead(conn=conn).items
    assert {letter.group_id for letter in letters} == {group.id}
    assert group.example_id == max(letter.id for letter in letters)
    assert group.first_seen == min(letter.died_at for letter in letters)
    assert group.last_seen == max(letter.died_at for letter in letters)


def test_another_exception_is_another_group_and_the_newest_comes_first(conn):
    die(conn, {"n": 1}, {"n": 2})
    die(conn, {"n": 3, "broken": True})
    broken, missing = dead_letters.groups(conn=conn)
    assert (broken.signature, broken.count) == ("LookupError: order <n> not found", 1)
    assert (missing.signature, missing.count) == ("ValueError: order <n> not found", 2)
    assert broken.id != missing.id and broken.last_seen >= missing.last_seen
    assert [g.id for g in dead_letters.groups(limit=1, conn=conn)] == [broken.id]


def test_replaying_or_discarding_a_letter_takes_it_out_of_its_group(conn):
    die(conn, {"n": 1}, {"n": 2}, {"n": 3})
    first, second, third = jobq.list_dead(conn=conn).items
    jobq.replay(first.id, conn=conn)
    assert [g.count for g in dead_letters.groups(conn=conn)] == [2]
    jobq.discard_dead(second.id, conn=conn)
    assert [g.count for g in dead_letters.groups(conn=conn)] == [1]
    jobq.discard_dead(first.id, conn=conn)  # replayed already: it no longer counted
    assert [g.count for g in dead_letters.groups(conn=conn)] == [1]
    jobq.replay(third.id, conn=conn)
    assert dead_letters.groups(conn=conn) == []  # a group with nothing waiting is not listed


@pytest.mark.parametrize("bad", [0, 1001, -1, True, "10", None])
def test_the_limit_is_checked(conn, bad):
    with pytest.raises(InvalidArgument) as caught:
        dead_letters.groups(limit=bad, conn=conn)
    assert caught.value.field == "limit"


def test_the_cli_lists_the_groups(conn, database_url):
    jobq.enqueue("always_fail", max_retries=0, conn=conn)
    drain(conn)
    env = {"DATABASE_URL": database_url}
    listed = json.loads(run_cli("dead", "groups", "--json", **env).stdout)["groups"]
    assert [(g["type"], g["count"]) for g in listed] == [("always_fail", 1)]
    table = run_cli("dead", "groups", COLUMNS="200", **env).stdout
    assert listed[0]["id"] in table and "RuntimeError: always_fail" in table


def test_listing_walks_the_index_of_groups_with_letters_waiting(conn):
    conn.execute(
        "INSERT INTO jobq_dead_letter_groups (id, type, signature, count, first_seen, last_seen, example_id) "
        "SELECT 'g' || i, 't', 's', CASE WHEN i % 500 = 0 THEN 1 ELSE 0 END, now(), "
        "now() - make_interval(secs => i), i "
        "FROM generate_series(1, 20000) AS i"
    )
    conn.execute("ANALYZE jobq_dead_letter_groups")
    explained = conn.execute("EXPLAIN " + DEAD_LETTER_GROUP_LIST_WAITING, {"limit": 100})
    plan = "\n".join(row[0] for row in explained)
    assert "jobq_dead_letter_groups_waiting_idx" in plan, plan
    assert [g.id for g in dead_letters.groups(limit=3, conn=conn)] == ["g500", "g1000", "g1500"]
