"""The daemon across database outages: restarts, terminated connections, a late start."""

import time

import psycopg
import pytest

import jobq
from support.daemon import LISTENERS, assert_woken_by_notification, worker_pids
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon]


def test_a_database_restart_while_jobs_flow_loses_nothing_and_records_each_outcome_once(own_postgres, daemon):
    url = own_postgres.url()
    with psycopg.connect(url, autocommit=True) as conn:
        jobq.enqueue_many([{"type": "slow", "payload": {"sleep_seconds": 0.004}}] * 2000, conn=conn)
    d = daemon(2, url=url)
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= 300, 30, "jobs flowing")
    own_postgres.stop()
    time.sleep(1.0)
    own_postgres.start()
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] == 2000, 60, "all 2000 jobs done after the restart")
        counts = jobq.counts(conn=conn)
        assert counts.totals["done_total"] == 2000  # each job entered done exactly once
        assert scalar(conn, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0
        wait_for(lambda: len(worker_pids(conn)) == 2, 15, "both workers registered again")
    log = d.log()
    assert "worker.connection_lost" in log and "worker.reconnected" in log


def test_jobs_still_start_after_the_listen_connection_is_killed_and_it_listens_again(conn, daemon):
    daemon(1, JOBQ_POLL_INTERVAL="2")
    wait_for(lambda: scalar(conn, LISTENERS) == 1, 15, "the worker listening")
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'jobq listener %%' "
                 "AND datname = current_database()")
    job = jobq.enqueue("noop", conn=conn)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 2 + 1.5, "the job started within the poll interval")
    wait_for(lambda: scalar(conn, LISTENERS) == 1, 10, "the worker listening again")
    assert_woken_by_notification(conn)  # by NOTIFY again, not by the poll


def test_workers_wait_for_a_database_that_is_down_at_start(own_postgres, daemon):
    own_postgres.stop()
    d = daemon(2, url=own_postgres.url())
    time.sleep(2)
    assert d.proc.poll() is None  # not a boot failure: still waiting
    own_postgres.start()
    with psycopg.connect(own_postgres.url(), autocommit=True) as conn:
        job = jobq.enqueue("noop", conn=conn)
        wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 20, "the job done once the database is up")
    assert "worker.db_unavailable" in d.log()
