"""jobq.Snooze: back to pending, later, without an attempt; counted, bounded, fenced."""

import psycopg
import pytest

import jobq
from support.waiting import wait_for
from jobq.jobs import leases

pytestmark = [pytest.mark.retry]


@pytest.mark.unit
def test_a_snooze_needs_a_number_of_seconds_up_to_a_year():
    assert jobq.Snooze(2.5).seconds == 2.5
    for bad in (-1, float("nan"), 400 * 86400, True, "5"):
        with pytest.raises(jobq.InvalidArgument):
            jobq.Snooze(bad)


@pytest.mark.db
@pytest.mark.daemon
def test_a_snoozed_job_runs_again_later_without_spending_an_attempt(ledger, daemon):
    job = jobq.enqueue("snooze_twice", max_retries=0, conn=ledger)
    d = daemon(1)
    done = wait_for(lambda: (j := jobq.get(job.id, conn=ledger)).status == "done" and j, 15, "the job done")
    assert (done.attempt, done.snoozes, done.result) == (0, 2, {"snoozes": 2, "attempt": 0})
    assert done.errors == [] and "job.snoozed" in d.log()
    totals = jobq.counts(conn=ledger).totals
    assert totals.get("failed_runs_total", 0) == 0 and totals["done_total"] == 1


@pytest.mark.db
@pytest.mark.daemon
def test_past_the_most_snoozes_a_snooze_is_a_failed_run(ledger, daemon):
    job = jobq.enqueue("snooze_forever", max_retries=1, conn=ledger)
    daemon(1, JOBQ_MAX_SNOOZES="3", JOBQ_BACKOFF_BASE="0.1")
    dead = wait_for(lambda: (j := jobq.get(job.id, conn=ledger)).status == "dead" and j, 15, "the job dead")
    assert dead.snoozes == 3 and dead.attempt == 1 and len(dead.errors) == 2
    assert all("JOBQ_MAX_SNOOZES" in e["error"] for e in dead.errors)


@pytest.mark.db
def test_a_snooze_under_a_stale_lease_changes_nothing(ledger):
    job = jobq.enqueue("noop", conn=ledger)
    with psycopg.connect(ledger.info.dsn, autocommit=True) as worker:
        (held,) = leases.claim(worker, ["default"], worker_id="test:1:x", limit=1, lock_base=0).result()
        jobq.cancel(job.id, conn=ledger)  # the cancel replaced the lease
        assert leases.snooze(worker, [held], [0.0], lock_base=0).result() == {job.id}
    after = jobq.get(job.id, conn=ledger)
    assert (after.status, after.snoozes) == ("cancelled", 0)
