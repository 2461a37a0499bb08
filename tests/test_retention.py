import threading
import time
from datetime import timedelta

import psycopg
import pytest

import jobq
from jobq.store.sql.database import DATABASE_NOW
from jobq.jobs import leases
from jobq.store import partitions
from jobq.store.retention import prune, prune_dead_letters
from support.claims import LOCK_BASE, claim, complete, drain
from support.cli import run_cli
from support.db import scalar
from support.waiting import wait_for

pytestmark = pytest.mark.db


def finish_jobs(conn) -> None:
    """3 done and 1 dead (with its dead letter), all finished an hour ago."""
    jobq.enqueue_many([{"type": "noop"}] * 3 + [{"type": "always_fail", "max_retries": 0}], conn=conn)
    drain(conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '1 hour'")


def test_prune_deletes_only_finished_jobs_past_the_cut_off_in_batches(no_partitions):
    conn = no_partitions  # the jobs finished an hour ago are in the default partition
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


def test_cli_prune_reports_what_it_deleted(no_partitions, database_url):
    finish_jobs(no_partitions)
    result = run_cli("prune", "--older-than", "60", DATABASE_URL=database_url)
    assert result.returncode == 0, result.stderr
    assert "deleted 4 finished job(s)" in result.stdout


def partition_names(conn) -> list[str]:
    return [p.name for p in partitions.listed(conn)]


def test_partitions_are_made_ahead_each_from_where_the_last_ends(no_partitions):
    conn = no_partitions
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    made = partitions.make_ahead(conn, 3600, now)
    assert len(made) == partitions.AHEAD + 1
    assert made[0].lo == partitions.slot_start(now, 3600) and made[0].lo <= now < made[0].hi
    assert all(a.hi == b.lo for a, b in zip(made, made[1:]))
    assert partitions.make_ahead(conn, 3600, now) == []  # already there
    later = partitions.make_ahead(conn, 3600, now + timedelta(hours=1))
    assert [p.lo for p in later] == [made[-1].hi]
    jobq.enqueue("noop", conn=conn)
    drain(conn)
    (where,) = conn.execute("SELECT tableoid::regclass::text FROM jobs").fetchone()
    assert where == made[0].name  # a job finishing now goes to the partition of the hour


def test_the_leader_analyses_the_partitioned_table_after_making_partitions_at_most_once_an_hour(
    no_partitions, monkeypatch
):
    conn = no_partitions

    def analyses() -> int:
        return scalar(conn, "SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass")

    before = analyses()
    monkeypatch.setattr(partitions, "ANALYSE_EVERY", 0.0)  # any analysis is old enough
    assert partitions.maintain(conn, 3600) == partitions.AHEAD + 1
    assert analyses() == before + 1
    partitions.drop_before(conn, partitions.listed(conn)[-1].hi)
    monkeypatch.setattr(partitions, "ANALYSE_EVERY", 3600.0)
    assert partitions.maintain(conn, 3600) == partitions.AHEAD + 1  # made again...
    assert analyses() == before + 1  # ...but the table was analysed a moment ago


def test_a_partition_starts_after_the_jobs_that_finished_into_the_default_partition(no_partitions):
    conn = no_partitions
    jobq.enqueue("noop", conn=conn)
    drain(conn)  # no partition yet: it lands in the default partition
    (completed_at,) = conn.execute("SELECT completed_at FROM jobs_finished_default").fetchone()
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    made = partitions.make_ahead(conn, 3600, now)
    assert made[0].lo == completed_at + timedelta(microseconds=1)  # ATTACH would refuse the job's range


def test_retention_drops_whole_partitions_past_the_cut_off_and_their_counts_and_keys(no_partitions):
    conn = no_partitions
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    partitions.make_ahead(conn, 3600, now - timedelta(hours=3))  # [-3h .. 0h) in hours, aligned
    old = jobq.enqueue_many([{"type": "noop", "idempotency_key": f"k{i}"} for i in range(3)], conn=conn)
    jobq.enqueue("always_fail", max_retries=0, conn=conn)
    drain(conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '150 minutes'")  # moves them to the old partition
    recent = jobq.enqueue("noop", conn=conn)
    drain(conn)
    before = jobq.counts(conn=conn)
    listed = partitions.listed(conn)
    assert prune(conn, older_than=1800) == 4
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    assert partition_names(conn) == [p.name for p in listed if p.hi > now - timedelta(seconds=1800)]
    assert [job.id for job in jobq.list_jobs(conn=conn).items] == [recent.id]
    after = jobq.counts(conn=conn)
    assert (after.depth["done"], after.depth["dead"]) == (1, 0)
    assert after.totals == before.totals  # totals stay monotonic
    assert jobq.list_dead(conn=conn).total == 1  # dead letters stay
    again = jobq.enqueue_many([{"type": "noop", "idempotency_key": f"k{i}"} for i in range(3)], conn=conn)
    assert {job.id for job in again}.isdisjoint({job.id for job in old})  # the keys were let go


def test_a_partition_keeps_its_jobs_until_all_of_it_is_past_the_retention(no_partitions):
    conn = no_partitions
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    partitions.make_ahead(conn, 86400, now)  # a day's partition: a job of a minute ago is kept
    jobq.enqueue("noop", conn=conn)
    drain(conn)
    conn.execute("UPDATE jobs SET completed_at = greatest(now() - interval '1 minute', date_trunc('day', now()))")
    assert prune(conn, older_than=30) == 0
    assert jobq.counts(conn=conn).depth["done"] == 1


def test_a_drop_waits_for_a_reader_of_jobs_in_short_tries_and_completions_go_through_meanwhile(
        no_partitions, database_url):
    """A reader of the whole table (a listing, a report) holds jobs_finished, which the
    DETACH of a partition takes in ACCESS EXCLUSIVE mode, and every completion queues
    behind that wait. The drop waits PARENT_LOCK_TIMEOUT_MS at a time, a few times, then
    leaves the partition to the next pass: a completion sent while it waits goes
    through after one short wait, not after the 500 ms of a whole lock timeout."""
    conn = no_partitions
    (now,) = conn.execute(DATABASE_NOW).fetchone()
    partitions.make_ahead(conn, 3600, now - timedelta(hours=3))
    jobq.enqueue("noop", conn=conn)
    drain(conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '150 minutes'")  # into the oldest partition
    oldest = partitions.listed(conn)[0].name
    jobq.enqueue("noop", conn=conn)
    (claimed,) = claim(conn)
    with psycopg.connect(database_url) as reader, psycopg.connect(database_url, autocommit=True) as dropper:
        reader.execute("SELECT count(*) FROM jobs")  # its open transaction holds every partition
        dropped: list[int] = []
        thread = threading.Thread(target=lambda: dropped.append(partitions.drop_before(dropper, now)))
        thread.start()
        waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        # polled more often than the drop's tries last (PARENT_LOCK_TIMEOUT_MS)
        wait_for(lambda: scalar(conn, waiting, dropper.info.backend_pid), 5, "the drop waiting for the reader",
                 interval=0.005)
        started = time.monotonic()
        assert complete(conn, [claimed]) == set()
        completion = time.monotonic() - started
        thread.join(10)
        assert dropped == [0] and oldest in partition_names(conn)  # left to the next pass
        reader.rollback()
        assert partitions.drop_before(dropper, now) == 1 and oldest not in partition_names(conn)
    assert completion < 0.3, completion


def test_a_write_that_meets_a_job_moved_meanwhile_fails_and_sent_again_is_a_stale_write(conn, database_url):
    """A job cancelled by an operator while its worker records its outcome: the row
    moves to jobs_finished under the operator's commit, and the worker's update, which
    waited for it, fails (40001) rather than follow the row there. leases.changed_meanwhile
    tells the worker's session to send it again; sent again, it is a stale write."""
    job = jobq.enqueue("noop", conn=conn)
    (claimed,) = claim(conn)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            leases.complete(conn, [claimed], ['{"ok":true}'], [0.0], lock_base=LOCK_BASE).result()
        except psycopg.Error as exc:
            failed.append(exc)

    with psycopg.connect(database_url) as operator:
        operator.execute("SELECT FROM jobs WHERE id = %s AND status = 'claimed' FOR UPDATE", (job.id,))
        writer = threading.Thread(target=write)
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # waiting for the operator's row lock
        operator.execute(
            "UPDATE jobs SET status = 'cancelled', completed_at = now(), lease = nextval('jobs_lease_seq') "
            "WHERE id = %s", (job.id,)
        )
    writer.join(10)
    assert len(failed) == 1 and isinstance(failed[0], psycopg.errors.SerializationFailure), failed
    assert leases.changed_meanwhile(failed[0])
    assert complete(conn, [claimed]) == {claimed.job_id}  # sent again: rejected, a stale lease
    assert jobq.get(job.id, conn=conn).status == "cancelled"


def test_dead_letters_go_after_their_own_retention(conn):
    jobq.enqueue_many([{"type": "always_fail", "max_retries": 0}] * 3, conn=conn)
    drain(conn)
    conn.execute(
        "UPDATE dead_letter_jobs SET died_at = now() - interval '2 days' WHERE id = (SELECT min(id) FROM dead_letter_jobs)"
    )
    assert prune_dead_letters(conn, older_than=86400, batch=1) == 1
    assert jobq.list_dead(conn=conn).total == 2


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
