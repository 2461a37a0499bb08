import random
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.errors import InvalidArgument, JobNotDeletable, JobNotFound
from jobq.store.sql.counters import COUNTER_LIST
from support.claims import claim, complete, drain, fail, settle

pytestmark = pytest.mark.db


def test_get_of_a_missing_job_raises(conn):
    with pytest.raises(JobNotFound):
        jobq.get(12345, conn=conn)


@pytest.mark.parametrize("bad", [0, -1, 2**63, True, "7"])
def test_get_refuses_ids_that_cannot_exist(conn, bad):
    with pytest.raises(InvalidArgument):
        jobq.get(bad, conn=conn)


def test_cancel_deletes_a_pending_job(conn):
    job = jobq.enqueue("noop", conn=conn)
    jobq.delete(job.id, conn=conn)
    with pytest.raises(JobNotFound):
        jobq.get(job.id, conn=conn)


def test_cancel_of_a_missing_job_raises_not_found(conn):
    with pytest.raises(JobNotFound):
        jobq.delete(999, conn=conn)


@pytest.mark.parametrize("status", ["claimed", "running", "done", "dead"])
def test_cancel_refuses_a_job_that_is_not_pending(conn, status):
    job = jobq.enqueue("noop", max_retries=0, conn=conn)
    (claimed,) = claim(conn)
    settle(conn, claimed, status)
    with pytest.raises(JobNotDeletable) as caught:
        jobq.delete(job.id, conn=conn)
    assert caught.value.status == status
    assert jobq.get(job.id, conn=conn).status == status


@pytest.fixture
def mixed(conn):
    """Jobs in every status jobq sets: 2 pending, 1 claimed, 1 running, 3 done, 1 dead."""
    jobq.enqueue_many([{"type": "noop", "queue": "q"}] * 3, conn=conn)
    drain(conn, queues=["q"])
    jobq.enqueue("always_fail", max_retries=0, queue="q", conn=conn)
    drain(conn, queues=["q"])
    jobq.enqueue_many([{"type": "echo", "queue": "r"}] * 2, conn=conn)
    leases.start(conn, claim(conn, 1, ["r"]), [0.0]).result()
    claim(conn, 1, ["r"])
    jobq.enqueue_many([{"type": "echo"}, {"type": "noop"}], conn=conn)


@pytest.mark.parametrize(
    ("status", "expected"),
    [("pending", 2), ("claimed", 1), ("running", 1), ("done", 3), ("failed", 0), ("dead", 1), (None, 8)],
)
def test_list_filters_by_each_status(conn, mixed, status, expected):
    page = jobq.list_jobs(status=status, conn=conn)
    assert page.total == expected and len(page.items) == expected
    assert all(job.status == status for job in page.items) or status is None


def test_list_filters_by_type_and_queue(conn, mixed):
    assert jobq.list_jobs(type="echo", conn=conn).total == 3
    assert jobq.list_jobs(queue="q", conn=conn).total == 4
    assert jobq.list_jobs(queue="r", status="running", conn=conn).total == 1
    assert jobq.list_jobs(type="echo", queue="r", conn=conn).total == 2


def test_list_created_after_is_strict(conn):
    first = jobq.enqueue("noop", conn=conn)
    second = jobq.enqueue("noop", conn=conn)
    page = jobq.list_jobs(created_after=first.created_at, conn=conn)
    assert [job.id for job in page.items] == [second.id] and page.total == 1
    assert jobq.list_jobs(created_after=first.created_at - timedelta(microseconds=1), conn=conn).total == 2


def test_list_is_newest_first_with_id_tiebreak_and_paginates(conn):
    batch = jobq.enqueue_many([{"type": "noop"}] * 5, conn=conn)  # one transaction: one created_at
    newest = jobq.enqueue("noop", conn=conn)
    expected = [newest.id] + [job.id for job in reversed(batch)]
    pages = [jobq.list_jobs(limit=2, offset=offset, conn=conn) for offset in (0, 2, 4, 6)]
    assert [job.id for page in pages for job in page.items] == expected
    assert {page.total for page in pages} == {6}
    assert (pages[1].limit, pages[1].offset) == (2, 2)


class EnqueuesAfterTheTotal(psycopg.Connection):
    """A connection on which another client enqueues a job right after the listing has
    read its total from the counters (once)."""

    other_client: Callable[[], None] | None = None

    def execute(self, query, params=None, **kwargs):  # type: ignore[override]
        answer = super().execute(query, params, **kwargs)
        if query == COUNTER_LIST and self.other_client is not None:
            self.other_client, enqueue = None, self.other_client
            enqueue()
        return answer


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_page_and_its_total_are_read_in_one_snapshot(conn, database_url, autocommit):
    """A job enqueued between the listing's total and its page is in neither: the page
    does not drop an older job to make room for it (which the dashboard saw once as a
    selected row gone)."""
    older = [jobq.enqueue("noop", conn=conn) for _ in range(3)]
    with EnqueuesAfterTheTotal.connect(database_url, autocommit=autocommit) as listing:
        listing.other_client = lambda: jobq.enqueue("noop", conn=conn)
        page = jobq.list_jobs(limit=10, conn=listing)
        assert listing.other_client is None  # it did enqueue, after the total
    assert [job.id for job in page.items] == [job.id for job in reversed(older)]
    assert page.total == 3
    assert jobq.list_jobs(limit=10, conn=conn).total == 4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"status": "finished"}, "status"), ({"limit": 0}, "limit"), ({"limit": 501}, "limit"),
     ({"limit": True}, "limit"), ({"offset": -1}, "offset"), ({"offset": 2**63}, "offset")],
)
def test_list_refuses_bad_parameters_naming_them(conn, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        jobq.list_jobs(conn=conn, **kwargs)
    assert caught.value.field == field


def actual_depth(conn) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())


def test_counters_are_exact_after_a_mixed_run(conn):
    rng = random.Random(7)
    types = ["noop", "always_fail", "flaky", "no_such_type"]
    enqueued = 0
    for _ in range(30):
        n = rng.randint(1, 20)
        jobq.enqueue_many([{"type": rng.choice(types), "max_retries": rng.randint(0, 3)} for _ in range(n)], conn=conn)
        enqueued += n
        got = claim(conn, rng.randint(0, 15))
        split = rng.randint(0, len(got))
        complete(conn, got[:split])
        fail(conn, got[split:])
        if rng.random() < 0.3:
            pending = jobq.list_jobs(status="pending", limit=1, conn=conn).items
            if pending:
                jobq.delete(pending[0].id, conn=conn)
    leases.start(conn, (running := claim(conn, 3)), [0.0] * len(running)).result()
    counts = jobq.counts(conn=conn)
    assert {k: v for k, v in counts.depth.items() if v} == actual_depth(conn)
    assert counts.totals["enqueued_total"] == enqueued
    done_total, dead_total, failed_runs = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead'), "
        "coalesce(sum(jsonb_array_length(errors)), 0) FROM jobs"
    ).fetchone()
    assert counts.totals.get("done_total", 0) == done_total
    assert counts.totals.get("dead_total", 0) == dead_total
    assert counts.totals.get("failed_runs_total", 0) == failed_runs

    # Deleting finished rows (retention) lowers the depth and leaves the totals alone.
    conn.execute("DELETE FROM jobs WHERE status IN ('done', 'dead')")
    after = jobq.counts(conn=conn)
    assert after.depth["done"] == after.depth["dead"] == 0
    assert after.totals == counts.totals


def test_counts_break_depth_and_totals_down_by_queue_and_type(conn):
    jobq.enqueue_many(
        [{"type": "noop", "queue": "a"}] * 2 + [{"type": "echo", "queue": "a"}, {"type": "echo", "queue": "b"}], conn=conn
    )
    complete(conn, claim(conn, 1, ["b"]))
    counts = jobq.counts(conn=conn)
    assert counts.queues["a"]["pending"] == 3 and counts.queues["b"]["done"] == 1
    assert counts.types["noop"]["pending"] == 2
    assert (counts.types["echo"]["pending"], counts.types["echo"]["done"], counts.types["echo"]["enqueued_total"]) == (1, 1, 2)
    assert set(counts.types["noop"]) >= set(jobq.STATUSES)
