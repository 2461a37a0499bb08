"""An idle worker's wake-up: the listener, in-process on a real database, and the
timer an idle worker sets from the claim that found the queue's end."""

import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import jobq
from support.daemon import LISTENERS, assert_woken_by_notification, worker_pids
from support.db import scalar
from support.waiting import wait_for
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.listener import Everyone, Listener
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from jobq.store.migrate import migrate

pytestmark = [pytest.mark.db, pytest.mark.daemon]


@pytest.fixture
def listener(database_url, conn):
    ear = Listener(database_url, ["default"], application_name="jobq listener test_wake")
    assert ear.connect()
    yield ear
    ear.close()


class Asked(Everyone):
    def __init__(self, take: bool = True) -> None:
        self.take = take
        self.asked: list[int] = []

    def wakes(self, jobs: int) -> bool:
        self.asked.append(jobs)
        return self.take


def test_a_listener_wakes_for_its_own_queues_with_the_number_of_jobs(conn, listener):
    waking = Asked()
    jobq.enqueue("noop", queue="elsewhere", conn=conn)
    started = time.monotonic()
    listener.wait(0.3, waking=waking)
    assert time.monotonic() - started >= 0.3  # another queue's jobs: slept to the timeout
    assert waking.asked == [] and listener.woken_by is None
    jobq.enqueue_many([{"type": "noop"}] * 3, conn=conn)
    started = time.monotonic()
    listener.wait(10, waking=waking)
    assert time.monotonic() - started < 2  # woken, not timed out
    assert waking.asked == [3] and listener.woken_by == "default"  # which queue's notification ended the wait


def test_a_notification_declined_leaves_the_listener_asleep(conn, listener):
    jobq.enqueue("noop", conn=conn)
    started = time.monotonic()
    listener.wait(0.3, waking=Asked(take=False))  # a lower idle worker takes it
    assert time.monotonic() - started >= 0.3


def test_a_notification_left_to_a_lower_worker_that_sleeps_on_is_taken_over(conn, listener):
    board = IdleBoard(2)
    board.mark(0, True)  # a lower idle worker that never reads its connection
    board.mark(1, True)
    jobq.enqueue("noop", conn=conn)
    started = time.monotonic()
    listener.wait(5, waking=board.seat(1))
    assert time.monotonic() - started < 1  # taken over after TAKE_OVER, not left until the timeout
    assert not board.idle(0)  # covered until it reads


def test_a_listener_whose_connection_breaks_stops_counting_as_idle_at_once_and_listens_again(conn, listener):
    board = IdleBoard(1)
    board.mark(0, True)
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jobq listener test_wake' "
                 "AND datname = current_database()")
    started = time.monotonic()
    listener.wait(10, waking=board.seat(0))
    # Told at once (a worker that NOTIFY cannot reach must not stay counted as idle),
    # and back as soon as the reconnect backoff allows, not at the 10 s timeout.
    assert not board.idle(0)
    assert time.monotonic() - started < 2
    assert listener.listening
    jobq.enqueue("noop", conn=conn)
    started = time.monotonic()
    listener.wait(10)
    assert time.monotonic() - started < 2


def test_the_next_scheduled_job_after_a_run_starts_on_time(conn, daemon):
    # The claim after a run that found the queue's end also asks when the next job is
    # due, in the same round trip: the worker sleeps until then, not the poll interval.
    daemon(1, JOBQ_POLL_INTERVAL="10")
    wait_for(lambda: len(worker_pids(conn)) == 1, 15, "the worker up")
    first = jobq.enqueue("noop", conn=conn)
    wait_for(lambda: jobq.get(first.id, conn=conn).status == "done", 5, "the first job done")
    run_at = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    now_job, later = jobq.enqueue_many([{"type": "noop"}, {"type": "noop", "run_at": run_at}], conn=conn)
    wait_for(lambda: jobq.get(later.id, conn=conn).status == "done", 8, "the scheduled job done")
    assert jobq.get(now_job.id, conn=conn).status == "done"
    lateness = float(scalar(conn, "SELECT extract(epoch FROM started_at - run_at) FROM jobs WHERE id = %s", later.id))
    assert 0 <= lateness < 0.5


def test_the_listener_hears_the_channel_the_schema_names_for_wake_ups(empty_database):
    """The wake-up channel is named in one place, jobq_wake_channel() (migration 0014):
    jobq_wake notifies on it, and the listener asks it before it listens."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute(
            "CREATE OR REPLACE FUNCTION jobq_wake_channel() RETURNS text LANGUAGE sql IMMUTABLE "
            "AS $$ SELECT 'jobq_elsewhere' $$"
        )
        ear = Listener(empty_database, ["default"], application_name="jobq listener test_wake")
        assert ear.connect()
        try:
            assert ear.channel == "jobq_elsewhere"
            waking = Asked()
            jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
            started = time.monotonic()
            ear.wait(10, waking=waking)
            assert time.monotonic() - started < 2  # woken on the renamed channel, not timed out
            assert waking.asked == [2]
        finally:
            ear.close()


def test_a_worker_kept_busy_from_its_start_listens_only_once_it_first_waits_for_work(conn, daemon):
    jobq.enqueue_many([{"type": "slow", "payload": {"sleep_seconds": 0.05}}] * 60, conn=conn)
    daemon(1)
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= 5, 15, "the backlog being drained")
    assert scalar(conn, LISTENERS) == 0  # no connection of its own waits for a notification yet
    assert jobq.counts(conn=conn).depth["done"] < 60  # and the worker was still busy when looked at
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] == 60, 30, "the backlog drained")
    wait_for(lambda: scalar(conn, LISTENERS) == 1, 10, "the idle worker listening")
    assert_woken_by_notification(conn)
