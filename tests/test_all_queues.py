"""``jobq worker --all-queues`` (make run's default): one worker serves every queue that
has jobs, queues that first appear after it started too, and honours pauses; its row
says so, with the job types it has handlers for."""

from __future__ import annotations

import pytest

import jobq
from jobq.daemon.worker.served import ServedQueues
from jobq.jobs import queues
from jobq.settings import Settings
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.control]


def _status(conn, job) -> str:
    return jobq.get(job.id, conn=conn).status


def test_an_all_queues_worker_serves_every_queue_new_ones_too_and_honours_a_pause(conn, daemon):
    before = [jobq.enqueue("noop", queue=q, conn=conn) for q in ("default", "mail", "media")]
    queues.pause("held", conn=conn)
    held = jobq.enqueue("noop", queue="held", conn=conn)
    d = daemon(1, "--all-queues")
    wait_for(lambda: all(_status(conn, job) == "done" for job in before), 30, "the jobs of three queues done")
    later = jobq.enqueue("noop", queue="reports", conn=conn)  # a queue that did not exist at start
    wait_for(lambda: _status(conn, later) == "done", 15, "a new queue's job done")
    assert _status(conn, held) == "pending"  # paused: never claimed
    queues.resume("held", conn=conn)
    wait_for(lambda: _status(conn, held) == "done", 15, "the resumed queue's job done")
    served, every, types = conn.execute("SELECT queues, all_queues, handler_types FROM workers").fetchone()
    assert (served, every) == ([], True) and {"noop", "echo"} <= set(types)
    assert "queues=(all)" in d.log()


def test_all_queues_and_named_queues_together_are_refused(database_url, tmp_path):
    from support.cli import run_cli

    result = run_cli("worker", "--all-queues", "--queues", "a", DATABASE_URL=database_url)
    assert result.returncode == 2 and "--all-queues" in result.stderr
    result = run_cli("worker", "--all-queues", DATABASE_URL=database_url, JOBQ_QUEUES="a")
    assert result.returncode == 2 and result.stderr.startswith("jobq: JOBQ_ALL_QUEUES:")


class CountedSession:
    """A claim session's ``run`` on the test's connection, counting the calls."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.calls = 0

    def run(self, call):
        self.calls += 1
        return call(self.conn, False)


def test_an_all_queues_worker_woken_for_a_queue_it_serves_claims_without_looking_the_queues_up_again(conn):
    """The look-up is a round trip before the claim, on the wake-up's path: it is made
    after a wait only when the wait may have been ended by a new queue."""
    jobq.enqueue("noop", queue="mail", conn=conn)
    served, session = ServedQueues(Settings.from_env({}, all_queues=True)), CountedSession(conn)
    served.refresh(session)
    assert served.names == ["mail"] and session.calls == 1
    served.woken("mail")  # a notification of a queue it serves
    served.refresh(session)
    assert session.calls == 1
    jobq.enqueue("noop", queue="media", conn=conn)
    served.woken("media")  # a queue it did not serve yet
    served.refresh(session)
    assert served.names == ["mail", "media"] and session.calls == 2
    served.woken(None)  # the poll, a signal, a take-over: anything may have appeared
    served.refresh(session)
    assert session.calls == 3
