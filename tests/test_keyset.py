"""Keyset pages of the job listing (GET /jobs?cursor=, before=; jobq.list_jobs): every
job once along a walk while jobs are added, the last page said, bad cursors refused
naming the field, and the page query reading about a page of rows deep in the table."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

import jobq
from support.api import assert_error
from jobq.store.sql.ledger import JOB_LIST_AFTER, JOB_LIST_FILTERS, JOB_LIST_PAGE
from jobq.jobs import cursors
from jobq.errors import InvalidArgument
from support.rows import insert_jobs, per_row

pytestmark = pytest.mark.dashboard


def seed(conn) -> list[int]:
    """Jobs in three statements (a statement's rows share created_at: ids break the ties),
    of two types and queues, some tagged; their ids newest first."""
    for n in (40, 25, 35):
        jobq.enqueue_many(
            [{"type": "x" if i % 3 else "y", "queue": "a" if i % 2 else "b", "tags": ["t"] if i % 5 == 0 else []}
             for i in range(n)],
            conn=conn,
        )
    return [row[0] for row in conn.execute("SELECT id FROM jobs ORDER BY created_at DESC, id DESC")]


def walk(limit: int, *, between=lambda: None, **criteria) -> list[int]:
    """Every page by cursor, calling ``between`` after each."""
    seen, cursor = [], None
    while True:
        page = jobq.list_jobs(limit=limit, cursor=cursor, **criteria)
        seen += [job.id for job in page.items]
        assert len(page.items) <= limit and len(seen) <= 1000, "the walk does not end"
        between()
        if page.next_cursor is None:
            return seen
        assert len(page.items) == limit  # only a full page has a next one
        cursor = page.next_cursor


@pytest.mark.parametrize(
    "criteria",
    [{}, {"queue": "a"}, {"status": "pending"}, {"type": "x"}, {"type": "y", "queue": "b"}, {"tag": "t"},
     {"tag": "t", "queue": "a"}, {"error": "nothing like it"}],
    ids=lambda c: ",".join(c) or "none",
)
def test_a_walk_by_cursor_sees_each_matching_job_once_while_jobs_are_added(conn, criteria):
    seed(conn)
    for limit in (1, 7, 10):
        expected = [job.id for job in jobq.list_jobs(limit=500, **criteria).items]
        assert len(expected) < 500 and (expected or "error" in criteria)
        added: list[int] = []

        def add() -> None:  # newer than every page already read: never in this walk
            if len(added) < 20:
                added.append(jobq.enqueue("x", queue="a", tags=["t"], conn=conn).id)
                added.append(jobq.enqueue("y", queue="b", conn=conn).id)

        seen = walk(limit, between=add, **criteria)
        assert seen == expected  # each once, in order
        assert added and set(added).isdisjoint(seen)


def test_a_full_last_page_has_no_next_cursor_and_an_offset_page_has_one_when_more_follow(conn):
    ids = seed(conn)  # 100 jobs
    first = jobq.list_jobs(limit=50)
    assert first.next_cursor is not None
    last = jobq.list_jobs(limit=50, cursor=first.next_cursor)
    assert [j.id for j in last.items] == ids[50:] and last.next_cursor is None
    assert (last.total, last.offset) == (100, 0)  # the whole filter's total
    by_offset = jobq.list_jobs(limit=30, offset=60)
    assert [j.id for j in jobq.list_jobs(limit=30, cursor=by_offset.next_cursor).items] == ids[90:]
    assert jobq.list_jobs(limit=10, offset=90).next_cursor is None
    assert jobq.list_jobs(limit=10, offset=100).next_cursor is None
    assert jobq.list_jobs(limit=100, tag="t").next_cursor is None


def test_before_starts_right_after_a_job(conn):
    ids = seed(conn)
    page = jobq.list_jobs(limit=5, before=ids[41])
    assert [j.id for j in page.items] == ids[42:47]
    assert [j.id for j in jobq.list_jobs(limit=5, cursor=page.next_cursor).items] == ids[47:52]
    assert [j.id for j in jobq.list_jobs(limit=500, before=ids[41], type="y").items] == [
        j.id for j in jobq.list_jobs(limit=500, type="y").items if ids.index(j.id) > 41
    ]
    assert jobq.list_jobs(before=ids[-1]).items == []


def test_a_cursor_is_opaque_and_anything_else_is_refused_naming_it():
    moment = datetime(2026, 3, 29, 1, 0, 0, 123456, tzinfo=timezone.utc)
    token = cursors.encode(moment, 2**63 - 1)
    assert cursors.decode(token) == (moment, 2**63 - 1)
    assert token.isascii() and "=" not in token and "/" not in token and "+" not in token
    raw = [json.dumps(v).encode() for v in (["2026-01-01T00:00:00", 1], ["2026-01-01T00:00:00+00:00", 0],
                                            ["2026-01-01T00:00:00+00:00", True], ["soon", 1], [1, 2], {"a": 1}, [1])]
    for bad in ["", "x", "!!!!", "a" * 201, 7, None, *(base64.urlsafe_b64encode(r).decode() for r in raw)]:
        with pytest.raises(InvalidArgument) as refused:
            cursors.decode(bad)
        assert refused.value.field == "cursor"


def test_get_jobs_pages_by_cursor_and_names_what_is_wrong(client, conn):
    ids = seed(conn)
    expected = [j.id for j in jobq.list_jobs(limit=500, queue="a").items]
    assert 30 < len(expected) <= 60
    first = client.get("/jobs?limit=30&queue=a").get_json()
    assert first["next_cursor"] and [j["id"] for j in first["items"]] == expected[:30]
    rest = client.get("/jobs", query_string={"limit": 30, "queue": "a", "cursor": first["next_cursor"]}).get_json()
    assert [j["id"] for j in rest["items"]] == expected[30:] and rest["next_cursor"] is None
    assert (rest["total"], rest["offset"]) == (len(expected), 0)
    assert [j["id"] for j in client.get(f"/jobs?before={ids[9]}&limit=3").get_json()["items"]] == ids[10:13]
    cursor = first["next_cursor"]
    for query, field in ((f"cursor={cursor}&offset=1", "offset"), (f"before={ids[0]}&offset=2", "offset"),
                         ("cursor=bogus", "cursor"), ("cursor=", "cursor"), ("cursor=" + "c" * 201, "cursor"),
                         (f"cursor={cursor}&before={ids[0]}", "before"), ("before=0", "before"),
                         ("before=x", "before"), (f"before={2**63}", "before"), ("before=999999999", "before")):
        detail = assert_error(client.get("/jobs?" + query), 400)
        assert field in str(detail), (query, detail)


@pytest.mark.parametrize("criteria", [{}, {"type": "y"}, {"status": "running"}, {"queue": "a"}, {"error": "boom"}],
                         ids=lambda c: ",".join(c) or "none")
def test_jobs_in_flight_are_listed_and_counted_in_their_place_among_the_others(conn, criteria):
    """The listing reads the jobs in flight apart from the others (schema 29: the listing
    indexes leave them out); every page, by offset or cursor, and every total are those
    of one plain query over all jobs, newest first."""
    statuses = "(ARRAY['pending', 'claimed', 'running', 'done', 'dead', 'cancelled'])[1 + i % 6]"
    insert_jobs(conn, 300, per_row(statuses), type=per_row("CASE WHEN i % 4 = 0 THEN 'y' ELSE 'x' END"),
                queue=per_row("CASE WHEN i % 5 < 2 THEN 'a' ELSE 'b' END"),
                error=per_row("CASE WHEN i % 7 = 0 THEN 'boom' END"),
                created_at=per_row("now() - (i / 4) * interval '1 s'"))  # ties of four, broken by id
    where = " AND ".join(["TRUE"] + [JOB_LIST_FILTERS[name] for name in criteria])
    params = {**criteria, "error": "%boom%"} if "error" in criteria else criteria
    expected = [row[0] for row in conn.execute(
        "SELECT id FROM jobs WHERE " + where + " ORDER BY created_at DESC, id DESC", params)]
    assert any(status in ("claimed", "running") for (status,) in conn.execute(
        "SELECT status FROM jobs WHERE id = ANY(%s)", [expected]))
    for limit, offset in ((7, 0), (7, 14), (50, 30), (500, 0)):
        page = jobq.list_jobs(limit=limit, offset=offset, **criteria)
        assert [job.id for job in page.items] == expected[offset:offset + limit]
        assert page.total == len(expected)
    assert walk(9, **criteria) == expected
    assert jobq.list_jobs(limit=10, capped=True, **criteria).total == len(expected)


def _scan_rows(plan: dict) -> list[tuple[str, str, int, str]]:
    """(node type, index, rows read, index condition) of every scan of a JSON plan; rows
    read are those it returned and those its filter dropped."""
    found = []
    if "Scan" in plan["Node Type"]:
        read = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        found.append((plan["Node Type"], plan.get("Index Name", ""), read, plan.get("Index Cond", "")))
    for child in plan.get("Plans", []):
        found += _scan_rows(child)
    return found


def test_a_page_by_cursor_deep_in_200000_jobs_reads_about_a_page_of_rows(conn):
    """One index range per partition read: of the finished jobs' (jobs_created_idx, or
    the filter's, as each partition has it) and, but for dead jobs, of the pending jobs'
    (jobs_pending_created_idx or jobs_pending_type_created_idx, which leave id out: see
    migration 0013), merged in order; the in-flight jobs (not in those indexes: a claim
    writes no entry there, schema 29) through the heartbeat index, no more of them."""
    in_flight = "WHEN i % 1000 = 3 THEN 'claimed' WHEN i % 1000 = 7 THEN 'running'"
    insert_jobs(conn, 200_000, per_row(f"CASE {in_flight} WHEN i % 10 = 0 THEN 'dead' WHEN i % 10 = 5 THEN 'pending' "
                                       "ELSE 'done' END"),
                type=per_row("CASE WHEN i % 2 = 0 THEN 'x' ELSE 'y' END"),
                created_at=per_row("now() - (i / 3) * interval '1 ms'"))  # completed_at now() once finished
    conn.execute("ANALYZE jobs")
    parent_of = dict(conn.execute(
        "SELECT c.relname, p.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
        "JOIN pg_class AS p ON p.oid = i.inhparent WHERE c.relkind = 'i'"
    ).fetchall())
    limit = 50
    for criteria, index, live_index, flying in (
        ({}, "jobs_created_idx", "jobs_pending_created_idx", 400),
        ({"type": "y"}, "jobs_type_created_idx", "jobs_pending_type_created_idx", 400),
        ({"status": "dead"}, "jobs_dead_created_idx", None, 0),
    ):
        deep = jobq.list_jobs(limit=limit, offset=18_000, **criteria)  # the depth of 90 % of 20,000 dead ones
        cursor = cursors.decode(deep.next_cursor)
        page = jobq.list_jobs(limit=limit, cursor=deep.next_cursor, **criteria)
        assert [j.id for j in page.items] == [j.id for j in jobq.list_jobs(limit=limit, offset=18_050, **criteria).items]
        where = " AND ".join(["TRUE"] + [JOB_LIST_FILTERS[name] for name in criteria] + [JOB_LIST_AFTER])
        statement = "EXPLAIN (ANALYZE, FORMAT JSON) " + JOB_LIST_PAGE.format(conditions=where)
        params = {**criteria, "after_created_at": cursor[0], "after_id": cursor[1], "limit": limit + 1, "offset": 0,
                  "first": limit + 1}
        plan = conn.execute(statement, params).fetchone()[0][0]["Plan"]
        scans = _scan_rows(plan)
        # One scan per partition of finished jobs (the default one, where these rows are,
        # and any range partition a leader made in this database), one of jobs_live's
        # pending rows and one of jobs_waiting (a workflow's steps, schema 15: empty here),
        # and one of the jobs in flight.
        unfinished = ("jobs_pending", "jobs_waiting")
        finished = [scan for scan in scans if scan[1] != "jobs_inflight_heartbeat_idx" and not scan[1].startswith(unfinished)]
        live = [scan for scan in scans if scan[1].startswith(unfinished)]
        flight = [scan for scan in scans if scan[1] == "jobs_inflight_heartbeat_idx"]
        assert finished and len(live) == (2 if live_index is not None else 0), scans
        for node, used, read, condition in finished:
            assert node == "Index Scan" and parent_of.get(used) in (index, "jobs_created_idx"), scans
            assert "ROW(created_at, id) < ROW(" in condition, condition  # the keyset is the index condition
        assert sum(scan[2] for scan in finished) <= 3 * (limit + 1), scans  # about a page, not the 18,000 before it
        for node, used, read, condition in live:
            assert node == "Index Scan" and used.replace("jobs_waiting", "jobs_pending") in (
                live_index, "jobs_pending_created_idx"), scans
            assert "created_at <=" in condition, scans
            assert read <= 3 * (limit + 1), scans
        # The in-flight rows: read through their own index, none beyond them.
        assert [(node, read) for node, _, read, _ in flight] == ([("Index Scan", 400)] if flying else []), scans
        assert sum(job.status in ("claimed", "running") for job in page.items) <= flying
        # ...where the same page by offset reads every row before it
        offset_where = " AND ".join(["TRUE"] + [JOB_LIST_FILTERS[n] for n in criteria])
        by_offset = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + JOB_LIST_PAGE.format(conditions=offset_where),
            {**criteria, "limit": limit, "offset": 18_050, "first": limit + 18_050}).fetchone()[0][0]["Plan"]
        assert sum(scan[2] for scan in _scan_rows(by_offset)) >= 18_050  # over the partitions
