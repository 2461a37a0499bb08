import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import jobq
import jobq.jobs.submit
from jobq.errors import InvalidArgument
from support.rows import insert_jobs, per_row

pytestmark = pytest.mark.db


def job_count(conn) -> int:
    return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


def notifications(listener: psycopg.Connection, wait: float = 0.3) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=wait)]


@pytest.fixture
def listener(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("LISTEN jobq")
        yield conn


def test_enqueue_returns_the_pending_row_with_defaults(conn):
    job = jobq.enqueue("noop", conn=conn)
    assert (job.status, job.priority, job.max_retries, job.attempt, job.queue) == ("pending", 5, 3, 0, "default")
    assert job.payload == {} and job.errors == [] and job.run_at == job.created_at
    assert jobq.get(job.id, conn=conn) == job


def test_enqueue_stores_every_argument(conn):
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    job = jobq.enqueue("echo", {"a": [1, {"b": None}]}, priority=9, max_retries=0, run_at=run_at, queue="mail", conn=conn)
    stored = jobq.get(job.id, conn=conn)
    assert (stored.payload, stored.priority, stored.max_retries, stored.queue) == ({"a": [1, {"b": None}]}, 9, 0, "mail")
    assert abs((stored.run_at - run_at).total_seconds()) < 1e-3


def test_the_job_an_enqueue_returns_is_the_row_as_stored(conn):
    """The one-row insert without a key returns four columns and builds the rest from
    what it was given: every field equals the stored row's, the traceparent the
    session's setting gave it included."""
    conn.execute("SELECT set_config('jobq.traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', false)")
    run_at = datetime.now(timezone.utc) + timedelta(minutes=5)
    job = jobq.enqueue("echo", {"a": [1, {"b": None}], "s": "é"}, priority=2, max_retries=7, run_at=run_at,
                       queue="mail", tags=["x", "y"], unique_while=None, concurrency_key="tenant:1", conn=conn)
    assert job.traceparent == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert jobq.get(job.id, conn=conn) == job


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"priority": True}, "priority"),
        ({"priority": "7"}, "priority"),
        ({"max_retries": 11}, "max_retries"),
        ({"payload": [1]}, "payload"),
        ({"payload": {"x": "\x00"}}, "payload"),
        ({"queue": ""}, "queue"),
    ],
)
def test_bad_arguments_raise_naming_the_field_and_store_nothing(conn, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        jobq.enqueue("noop", conn=conn, **kwargs)
    assert caught.value.field == field
    assert job_count(conn) == 0


def test_sql_looking_strings_are_stored_verbatim(conn):
    text = "'); DROP TABLE jobs; --"
    job = jobq.enqueue(text, {"q": text}, queue=text, conn=conn)
    assert jobq.get(job.id, conn=conn).payload == {"q": text}
    assert job_count(conn) == 1


def test_enqueue_without_conn_uses_database_url(conn):
    job = jobq.enqueue("noop")
    assert jobq.get(job.id, conn=conn).id == job.id


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job_and_no_wakeup(database_url, conn, listener):
    with psycopg.connect(database_url) as tx_conn:
        jobq.enqueue("noop", conn=tx_conn)
        assert notifications(listener) == []  # nothing before commit either
        tx_conn.rollback()
    assert job_count(conn) == 0
    assert notifications(listener) == []


def test_enqueue_in_a_committed_transaction_wakes_workers_at_commit(database_url, conn, listener):
    with psycopg.connect(database_url) as tx_conn:
        jobq.enqueue("noop", queue="mail", conn=tx_conn)
        assert notifications(listener, 0.2) == []
        tx_conn.commit()
    assert notifications(listener) == ["mail 1"]  # the queue, and how many jobs
    assert job_count(conn) == 1


def test_a_session_with_jobq_notify_off_wakes_no_worker_and_still_counts(database_url, conn, listener):
    """``SET jobq.notify = off`` (docs/architecture.md) silences the counters' triggers'
    wake-ups, after an insert and after an update that leaves rows pending, and nothing
    else: the jobs are counted as ever; the setting's default wakes as before."""
    with psycopg.connect(database_url, autocommit=True) as quiet:
        quiet.execute("SET jobq.notify = off")
        job = jobq.enqueue("noop", queue="mail", conn=quiet)
        jobq.enqueue_many([{"type": "noop", "queue": "mail"}] * 3, conn=quiet)
        quiet.execute("UPDATE jobs SET status = 'claimed' WHERE id = %s", (job.id,))
        quiet.execute("UPDATE jobs SET status = 'pending' WHERE id = %s", (job.id,))
        assert notifications(listener) == []
        quiet.execute("RESET jobq.notify")
        quiet.execute("UPDATE jobs SET status = 'claimed' WHERE id = %s", (job.id,))
        quiet.execute("UPDATE jobs SET status = 'pending' WHERE id = %s", (job.id,))
    assert notifications(listener) == ["mail 1"]
    assert jobq.counts(conn=conn).queues["mail"]["pending"] == 4


def test_enqueue_many_keeps_order_and_sends_one_wakeup_per_queue(conn, listener):
    specs = [{"type": "echo", "payload": {"i": i}, "queue": "a" if i % 2 else "b"} for i in range(10_000)]
    started = time.monotonic()
    jobs = jobq.enqueue_many(specs, conn=conn)
    assert time.monotonic() - started < 30  # a generous protocol bound, not a speed test
    assert [job.payload["i"] for job in jobs] == list(range(10_000))
    assert job_count(conn) == 10_000
    assert sorted(notifications(listener)) == ["a 5000", "b 5000"]


def test_enqueue_many_is_all_or_nothing(conn):
    with pytest.raises(InvalidArgument) as caught:
        jobq.enqueue_many([{"type": "noop"}, {"type": "noop", "priority": 0}], conn=conn)
    assert caught.value.field == "jobs[1].priority"
    assert job_count(conn) == 0


def test_enqueue_many_of_nothing_is_nothing(conn):
    assert jobq.enqueue_many([], conn=conn) == []


def test_same_idempotency_key_returns_the_existing_job(conn):
    first = jobq.enqueue("noop", {"v": 1}, idempotency_key="order-17", conn=conn)
    second = jobq.enqueue("noop", {"v": 2}, idempotency_key="order-17", conn=conn)
    assert second.id == first.id and second.payload == {"v": 1}
    assert job_count(conn) == 1


def test_enqueue_many_returns_existing_jobs_for_taken_keys(conn):
    taken = jobq.enqueue("noop", idempotency_key="k2", conn=conn)
    jobs = jobq.enqueue_many(
        [{"type": "noop", "idempotency_key": "k1"}, {"type": "noop", "idempotency_key": "k2"}, {"type": "noop"}],
        conn=conn,
    )
    assert jobs[1].id == taken.id
    assert len({job.id for job in jobs}) == 3
    assert job_count(conn) == 3


def test_a_key_repeated_within_one_batch_is_refused(conn):
    with pytest.raises(InvalidArgument) as caught:
        jobq.enqueue_many([{"type": "noop", "idempotency_key": "k"}] * 2, conn=conn)
    assert caught.value.field == "idempotency_key"
    assert job_count(conn) == 0


def test_a_key_is_free_again_once_its_job_is_gone(conn):
    first = jobq.enqueue("noop", idempotency_key="k", conn=conn)
    jobq.delete(first.id, conn=conn)
    assert jobq.enqueue("noop", idempotency_key="k", conn=conn).id != first.id


AWKWARD_TAGS = ['a,b', '{braces}', 'quo"te', 'back\\slash', 'NULL', ' spaced ', 'ünï €']


def varied(n: int) -> list[dict]:
    """Jobs that differ in every column the insert writes."""
    return [
        {"type": f"t{i % 3}", "queue": "q" if i % 2 else "default", "payload": {"i": i, "s": "é\\u0000"},
         "priority": 1 + i % 10, "max_retries": i % 11, "tags": AWKWARD_TAGS if i % 4 == 0 else None,
         "run_at": datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=i % 5))) if i % 5 else None}
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [2, jobq.jobs.submit.COPY_THRESHOLD - 1, jobq.jobs.submit.COPY_THRESHOLD, 1500])
def test_enqueue_many_returns_each_job_as_it_was_stored(conn, n):
    # Small batches go in by one array INSERT, from COPY_THRESHOLD on by COPY: the jobs
    # returned are built by the client, and must be the rows as stored, field by field.
    jobs = jobq.enqueue_many(varied(n), conn=conn)
    assert jobs == [jobq.get(job.id, conn=conn) for job in jobs]
    assert [job.payload["i"] for job in jobs] == list(range(n))
    assert len({job.created_at for job in jobs}) == 1 and all(job.unique_while == "always" for job in jobs)
    keyed = jobq.enqueue_many([{"type": "k", "idempotency_key": f"k{i}", "unique_while": "pending"} for i in range(n)], conn=conn)
    assert keyed == [jobq.get(job.id, conn=conn) for job in keyed]


def test_a_copied_batch_in_the_callers_transaction_is_stored_at_its_commit(database_url, conn, listener):
    with psycopg.connect(database_url) as other:  # not autocommit: reservation, COPY and rows in one transaction
        jobs = jobq.enqueue_many([{"type": "noop", "queue": "c"}] * jobq.jobs.submit.COPY_THRESHOLD, conn=other)
        assert job_count(conn) == 0 and notifications(listener) == []
        (now,) = other.execute("SELECT now()").fetchone()
        other.commit()
    assert notifications(listener) == [f"c {jobq.jobs.submit.COPY_THRESHOLD}"]
    assert jobs == [jobq.get(job.id, conn=conn) for job in jobs]
    assert {job.created_at for job in jobs} == {job.run_at for job in jobs} == {now}  # the defaults' value


def test_one_insert_of_mixed_queues_types_and_statuses_is_counted_exactly_and_wakes_each_queue_once(conn, listener):
    # The insert trigger (schema 11) counts a statement's rows in one pass over them.
    insert_jobs(conn, 600, per_row("(ARRAY['pending', 'pending', 'done', 'dead', 'cancelled'])[1 + i % 5]"),
                type=per_row("'t' || i % 3"), queue=per_row("'q' || i % 2"))
    jobq.enqueue_many([{"type": "t0", "queue": "q0"}] * 150, conn=conn)
    expected = {(queue, type_, status): n for queue, type_, status, n in conn.execute(
        "SELECT queue, type, status, count(*) FROM jobs GROUP BY 1, 2, 3")}
    expected |= {(queue, type_, "enqueued_total"): n for queue, type_, n in conn.execute(
        "SELECT queue, type, count(*) FROM jobs GROUP BY 1, 2")}
    counted = {(queue, type_, name): n for queue, type_, name, n in conn.execute(
        "SELECT queue, type, name, sum(n)::bigint FROM job_counters GROUP BY 1, 2, 3 HAVING sum(n) <> 0")}
    assert counted == expected
    pending = dict(conn.execute("SELECT queue, count(*) FROM jobs WHERE status = 'pending' AND id <= 600 GROUP BY 1").fetchall())
    assert sorted(notifications(listener)) == sorted([f"{queue} {n}" for queue, n in pending.items()] + ["q0 150"])


def test_the_copy_stream_carries_every_value_jobspec_allows(conn):
    # jobq.jobs.copy_rows encodes COPY's binary format by hand: the extremes of each column.
    extremes = [
        {"type": "ü" * 200, "queue": "€" * 100, "priority": 10, "max_retries": 10,
         "run_at": datetime(1, 1, 1, tzinfo=timezone.utc), "tags": [f"{i:02d}" + "ñ" * 98 for i in range(20)]},
        {"type": "t", "priority": 1, "max_retries": 0, "run_at": datetime(9999, 12, 31, 23, 59, 59, 999999),
         "payload": {"big": "x" * 100_000, "deep": [[[[{"a": None}]]]], "n": -(2**63), "f": 1.5e-300}},
        {"type": "t", "run_at": datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc), "tags": ["\\", '"', ",{}"]},
    ] * (jobq.jobs.submit.COPY_THRESHOLD // 3 + 1)
    jobs = jobq.enqueue_many(extremes, conn=conn)
    assert jobs == [jobq.get(job.id, conn=conn) for job in jobs]
    assert jobs[0].type == "ü" * 200 and jobs[0].run_at == datetime(1, 1, 1, tzinfo=timezone.utc)
    assert jobs[1].payload["big"] == "x" * 100_000 and jobs[1].run_at.year == 9999 and jobs[2].tags == ["\\", '"', ",{}"]
