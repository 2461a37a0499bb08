"""A cancel that wins over a success still in its worker's buffer drops no result in
silence: the job stays cancelled, with the handler's result and when it finished."""

from __future__ import annotations

import time

import psycopg
import pytest

import jobq
from support import ledger
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.control]


def test_a_cancel_committed_while_a_finished_run_waits_to_be_written_keeps_its_result(
    conn, database_url, daemon, tmp_path, client
):
    path = tmp_path / "ledger"
    daemon(1, **{ledger.ENV: str(path)})
    job = jobq.enqueue("held", {"seconds": 0.5}, conn=conn)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "running", 15, "the job running")
    with psycopg.connect(database_url) as operator:  # one transaction: the row lock, then the cancel
        operator.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        # The handler finishes; its success waits on the row lock: the cancel commits first.
        wait_for(lambda: [run for run in ledger.runs(path) if run.how == "returned"], 15, "the handler returned")
        time.sleep(0.5)
        assert jobq.get(job.id, conn=conn).status == "running"  # its outcome not written
        cancelled = jobq.cancel(job.id, actor="operator", conn=operator)
        assert cancelled.status == "cancelled" and cancelled.handler_finished_at is None  # not known yet
    noted = wait_for(lambda: (j := jobq.get(job.id, conn=conn)).handler_finished_at and j, 15,
                     "the finished run noted on the cancelled job")
    assert noted.status == "cancelled" and noted.cancelled_by == "operator"
    assert noted.result == {"host": None}
    [run] = ledger.runs(path)
    body = client.get(f"/jobs/{job.id}").get_json()
    assert body["status"] == "cancelled" and body["result"] == {"host": None}
    assert body["handler_finished_at"] is not None
