"""One filter (jobq.jobs.filters) for GET /jobs, jobq.list_jobs, dry runs and bulk actions:
each criterion narrows, all hold together, bad values are refused naming the field."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import jobq
from support.api import assert_error
from support.rows import seed
from jobq.errors import InvalidArgument
from jobq.jobs.filters import JobFilter, parse_filter

pytestmark = [pytest.mark.control, pytest.mark.db]


def ids_of(page) -> list[int]:
    return sorted(job.id for job in page.items)


def test_each_criterion_narrows_and_all_hold_together(control):
    a = seed(control, 3, "dead", type="a", queue="q", error="KeyError: 'order_17'", tags=["red", "blue"])
    b = seed(control, 2, "pending", type="b", queue="q", tags=["blue"])
    c = seed(control, 2, "done", type="c", queue="r", error="timeout after 30 s")
    everything = sorted(a + b + c)
    assert ids_of(jobq.list_jobs(conn=control)) == everything
    assert ids_of(jobq.list_jobs(tag="blue", conn=control)) == sorted(a + b)
    assert ids_of(jobq.list_jobs(tag="red", status="dead", queue="q", type="a", conn=control)) == a
    assert ids_of(jobq.list_jobs(ids=[a[0], c[1], 10**9], conn=control)) == [a[0], c[1]]
    assert ids_of(jobq.list_jobs(error="ORDER_1", conn=control)) == a  # any case, _ taken literally
    assert ids_of(jobq.list_jobs(error="order%17", conn=control)) == []
    assert ids_of(jobq.list_jobs(error="TIMEOUT", status="done", conn=control)) == c
    created = control.execute("SELECT created_at FROM jobs LIMIT 1").fetchone()[0]
    assert ids_of(jobq.list_jobs(created_before=created + timedelta(seconds=1), conn=control)) == everything
    assert ids_of(jobq.list_jobs(created_before=created, conn=control)) == []
    assert ids_of(jobq.list_jobs(created_after=created - timedelta(seconds=1), type="c", conn=control)) == c
    page = jobq.list_jobs(tag="blue", limit=2, conn=control)
    assert (page.total, len(page.items)) == (5, 2)
    control.execute("UPDATE jobs SET schedule = 'nightly' WHERE id = ANY(%s)", (c,))
    assert ids_of(jobq.list_jobs(schedule="nightly", conn=control)) == c
    assert ids_of(jobq.list_jobs(schedule="hourly", conn=control)) == []


def test_the_seed_parameters_keep_their_counter_based_total(control):
    seed(control, 3, "pending", queue="q")
    control.execute("DELETE FROM job_counters")  # the fast path reads the counters, not the table
    assert jobq.list_jobs(status="pending", queue="q", conn=control).total == 0
    assert jobq.list_jobs(status="pending", tag="x", conn=control).total == 0
    assert jobq.list_jobs(type="seeded", conn=control).total == 3


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"status": "finished"}, "status"),
        ({"queue": 7}, "queue"),
        ({"tag": "x" * 101}, "tag"),
        ({"tag": "a\x00"}, "tag"),
        ({"ids": []}, "ids"),
        ({"ids": [1, True]}, "ids[1]"),
        ({"ids": list(range(1, 1002))}, "ids"),
        ({"created_after": 1700000000}, "created_after"),
        ({"created_before": "9999-12-31T23:59:59-05:00"}, "created_before"),
        ({"error": ""}, "error"),
        ({"eror": "x"}, "eror"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_field(values, field):
    with pytest.raises(InvalidArgument) as caught:
        parse_filter(values)
    assert caught.value.field == field


def test_the_filter_is_sql_with_placeholders_only():
    job_filter = JobFilter(error="50%_off", tag="x", created_after=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert job_filter.params()["error"] == "%50\\%\\_off%"
    assert job_filter.to_json() == {"tag": "x", "created_after": "2026-01-01T00:00:00Z", "error": "50%_off"}


def test_get_jobs_takes_the_new_criteria_and_names_a_bad_one(client, control):
    a = seed(control, 2, "dead", type="a", tags=["urgent"], error="boom")
    seed(control, 2, "pending", type="b")
    page = client.get(f"/jobs?tag=urgent&ids={a[0]}&ids={a[1]}&error=BOO&created_before=2999-01-01").get_json()
    assert sorted(job["id"] for job in page["items"]) == a and page["total"] == 2
    assert "ids" in assert_error(client.get("/jobs?ids=0"), 400)
    assert "created_before" in assert_error(client.get("/jobs?created_before=soon"), 400)


def test_with_a_new_criterion_the_total_is_counted_only_so_far_past_the_offset(client, control, monkeypatch):
    from jobq.jobs import ledger

    monkeypatch.setattr(ledger, "COUNT_LIMIT", 5)
    seed(control, 8, "pending", tags=["many"])
    page = jobq.list_jobs(tag="many", limit=2, conn=control)
    assert (page.total, page.total_exact, len(page.items)) == (5, False, 2)
    assert (jobq.list_jobs(tag="many", offset=4, conn=control).total, jobq.list_jobs(type="seeded").total) == (8, 8)
    shown = client.get("/jobs?tag=many&limit=1").get_json()
    assert (shown["total"], shown["total_exact"]) == (5, False)
    assert "total_exact" not in client.get("/jobs?tag=many&offset=3").get_json()
    assert jobq.list_jobs(tag="many", offset=2**63 - 2, conn=control).items == []  # the cap stays a bigint
