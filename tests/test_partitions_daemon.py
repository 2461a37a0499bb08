"""A real `jobq worker` with a two-second partition interval and retention: its
maintenance leader makes the partitions of finished jobs ahead of time, the jobs it
runs land in them, and retention drops them whole, with the depth counters following
and the totals kept."""

from __future__ import annotations

import pytest

import jobq
from support.waiting import wait_for
from jobq.store.sql.database import DATABASE_NOW
from jobq.store import partitions

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.scale]


def test_the_leader_makes_partitions_ahead_and_retention_drops_them_with_their_jobs(no_partitions, daemon):
    conn = no_partitions
    daemon(2, JOBQ_PARTITION_INTERVAL="2", JOBQ_RETENTION="2", JOBQ_REAPER_INTERVAL="0.5")

    def made_ahead():
        # The leader attaches one partition per transaction: the listing may be read
        # between the one that covers now and those ahead of it.
        made = partitions.listed(conn)
        (now,) = conn.execute(DATABASE_NOW).fetchone()
        return made if made and made[-1].hi > now else None

    first = wait_for(made_ahead, 15, "partitions made ahead of now by the leader")
    jobq.enqueue_many([{"type": "noop"}] * 200, conn=conn)
    wait_for(lambda: jobq.counts(conn=conn).totals.get("done_total") == 200, 20, "200 jobs done")
    where = {row[0] for row in conn.execute("SELECT tableoid::regclass::text FROM jobs")}
    assert where and "jobs_finished_default" not in where and "jobs_live" not in where
    wait_for(lambda: conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0, 20, "the jobs' partitions dropped")
    counts = jobq.counts(conn=conn)
    assert counts.depth["done"] == 0 and counts.totals["done_total"] == 200
    assert not where & {p.name for p in partitions.listed(conn)}  # gone, and
    assert partitions.listed(conn)[-1].hi > first[-1].hi  # later ones made meanwhile
