import pytest

import jobq
from jobq.retention import prune
from support import drain, run_cli

pytestmark = pytest.mark.db


def finish_jobs(conn) -> None:
    """3 done and 1 dead (with its dead letter), all finished an hour ago."""
    jobq.enqueue_many([{"type": "noop"}] * 3 + [{"type": "always_fail", "max_retries": 0}], conn=conn)
    drain(conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '1 hour'")


def test_prune_deletes_only_finished_jobs_past_the_cut_off_in_batches(conn):
    finish_jobs(conn)
    fresh = jobq.enqueue("noop", conn=conn)
    drain(conn)  # done now: too young to prune
    waiting = jobq.enqueue("noop", conn=conn)
    before = jobq.counts(conn=conn)
    assert prune(conn, older_than=1800, batch=2) == 4
    remaining = {job.id: job.status for job in jobq.list_jobs(conn=conn).items}
    assert remaining == {fresh.id: "done", waiting.id: "pending"}
    after = jobq.counts(conn=conn)
    assert (after.depth["dead"], after.depth["done"], after.depth["pending"]) == (0, 1, 1)
    assert after.totals == before.totals  # totals stay monotonic
    assert jobq.list_dead(conn=conn).total == 1  # dead letters stay


def test_prune_leaves_pending_and_in_flight_jobs_alone(conn):
    jobq.enqueue("noop", conn=conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '1 day'")  # even if a timestamp says old
    assert prune(conn, older_than=60) == 0
    assert jobq.counts(conn=conn).depth["pending"] == 1


def test_cli_prune_reports_what_it_deleted(conn, database_url):
    finish_jobs(conn)
    result = run_cli("prune", "--older-than", "60", DATABASE_URL=database_url)
    assert result.returncode == 0, result.stderr
    assert "deleted 4 finished job(s)" in result.stdout


def test_cli_dead_replay_and_discard(conn, database_url):
    jobq.enqueue("always_fail", max_retries=0, conn=conn)
    drain(conn)
    (row,) = jobq.list_dead(conn=conn).items
    run = lambda *args: run_cli("dead", *args, DATABASE_URL=database_url, COLUMNS="200")  # noqa: E731
    listing = run("list")
    assert listing.returncode == 0 and "always_fail" in listing.stdout
    replayed = run("replay", str(row.id))
    assert replayed.returncode == 0 and "replayed as job" in replayed.stdout
    again = run("replay", str(row.id))
    assert again.returncode == 1 and again.stderr.startswith("jobq: dead-letter entry") and "already replayed" in again.stderr
    assert run("discard", str(row.id)).returncode == 0
    missing = run("discard", str(row.id))
    assert missing.returncode == 1 and missing.stderr.strip() == f"jobq: dead-letter entry {row.id} not found"
