"""The maintenance leader's host partitioned during periodic firing, for a 30 s outage
(support.netns: three hosts for real, each declaring the same schedules).

Nobody fires while the cut-off leader's session holds the leader lock: the server ends
it, freeing the lock, only after JOBQ_DEAD_CONNECTION_TIMEOUT + JOBQ_CANCEL_GRACE + the
margin, here 30 s. Then another host leads and fires what was missed, by each
schedule's ``catch_up``: a slot less than the on-time grace (10 s) old fires whatever
the policy; an older one is missed, and ``all`` fires every missed slot once,
``latest`` only the latest (when no slot is on time). Every slot fires once at most
(the schedule's row lock, the slot's idempotency key), and the ledger shows each job
run, by host, never twice at once.

``burst_*`` fire six slots two seconds apart once a minute, placed so that the partition
comes just before them and the new leader only after the last is older than the grace:
no slot of theirs is on time at the take-over, so ``latest`` fires exactly one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pytest

from jobq.daemon.maintenance.firing import ON_TIME_GRACE
from jobq.store.keepalive import SERVER_MARGIN
from jobq.schedules import stored
from support import ledger, schedules
from support.waiting import wait_for
from test_hosts import host_of, leaders
from test_hosts_partition import SLACK

pytestmark = [pytest.mark.db, pytest.mark.chaos, pytest.mark.hosts, pytest.mark.schedules]

DEAD, GRACE = 22.0, 3.0  # the server ends a silent session after DEAD + GRACE + SERVER_MARGIN: 30 s
OUTAGE = DEAD + GRACE + SERVER_MARGIN
BURST = 6  # slots, two seconds apart
BEFORE = (8, 3)  # the partition comes this many seconds (at most, at least) before a burst's first slot
RUN = {"seconds": 0.01}  # each job's run (held runs for ever without it)
FIRED = "SELECT scheduled_for, created_at FROM jobs WHERE schedule = %s ORDER BY scheduled_for"


def fired(conn: psycopg.Connection, name: str) -> list[tuple[datetime, datetime]]:
    """(slot, when its job was made) of every job a schedule fired, by slot."""
    return conn.execute(FIRED, (name,)).fetchall()


def clock(conn: psycopg.Connection) -> datetime:
    """The database's clock, which reckons the slots."""
    return conn.execute("SELECT now()").fetchone()[0]


def test_the_leaders_host_cut_off_for_30_s_every_slot_fires_once_by_its_catch_up(cluster, tmp_path):
    path = tmp_path / "ledger"
    url = cluster.url()
    with psycopg.connect(url, autocommit=True) as conn:
        now = conn.execute("SELECT date_trunc('second', now())").fetchone()[0]
        first = (now + timedelta(seconds=40)).second  # the burst's first second of each minute
        seconds = ",".join(str((first + 2 * k) % 60) for k in range(BURST))
        declared = ";".join([
            schedules.entry("every_second", "* * * * * *", type="held", catch_up="all", payload=RUN),
            schedules.entry("burst_all", f"* * * * * {seconds}", type="held", catch_up="all", payload=RUN),
            schedules.entry("burst_latest", f"* * * * * {seconds}", type="held", catch_up="latest", payload=RUN),
        ])
        for host in cluster.hosts:
            host.start(tmp_path, 2, JOBQ_DEAD_CONNECTION_TIMEOUT=f"{DEAD:g}", JOBQ_CANCEL_GRACE=f"{GRACE:g}",
                       JOBQ_HANDLERS="support.handlers,support.schedules", JOBQ_TEST_SCHEDULES=declared,
                       **{ledger.ENV: str(path)})
        leader = host_of(wait_for(lambda: leaders(conn), 60, "a maintenance leader")[0])
        wait_for(lambda: len(fired(conn, "every_second")) >= 3, 60, "every_second firing")

        # The partition, just before a burst (the next minute's, if this one's is too near).
        burst = now.replace(second=first) + timedelta(minutes=0 if first > now.second else 1)
        while clock(conn) > burst - timedelta(seconds=BEFORE[1]):
            burst += timedelta(minutes=1)
        wait_for(lambda: clock(conn) >= burst - timedelta(seconds=BEFORE[0]), 70, "the partition's moment")
        cut = next(host for host in cluster.hosts if host.name == leader)
        cut.partition()
        cut_at = clock(conn)
        slots = [burst + timedelta(seconds=2 * k) for k in range(BURST)]
        wait_for(lambda: len(fired(conn, "burst_all")) >= BURST and fired(conn, "burst_all")[-1][0] >= slots[-1],
                 OUTAGE + 3 * SLACK, "the burst fired by a new leader")
        took_over = fired(conn, "burst_all")[-1][1]
        new_leader = host_of(leaders(conn)[0])
        wait_for(lambda: fired(conn, "every_second")[-1][0] >= took_over + timedelta(seconds=3), 2 * SLACK,
                 "every_second firing on time again")
        cut.heal()
        wait_for(lambda: "worker.reconnected" in cut.daemon.log(), 2 * DEAD + 2 * SLACK, "the cut-off host back")
        for name in ("every_second", "burst_all", "burst_latest"):  # what fired, all run, counted still
            stored.pause(name, reason="the test counts what fired", conn=conn)
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs WHERE status <> 'done'").fetchone()[0] == 0,
                 OUTAGE + 3 * SLACK, "every periodic job done")

        every = fired(conn, "every_second")
        seconds_fired = [slot for slot, _ in every]
        span = int((seconds_fired[-1] - seconds_fired[0]).total_seconds()) + 1
        twice = len(seconds_fired) - len(set(seconds_fired))
        missed = span - len(set(seconds_fired))
        late = sum(made - slot > ON_TIME_GRACE for slot, made in every)
        latest_missed = [made - slot > ON_TIME_GRACE for slot, made in fired(conn, "burst_latest") if slot == slots[-1]]
        burst_all = [slot for slot, _ in fired(conn, "burst_all") if slots[0] <= slot <= slots[-1]]
        burst_latest = [slot for slot, _ in fired(conn, "burst_latest") if slots[0] <= slot <= slots[-1]]
        enqueued = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        counts = ledger.tally("leader partitioned during periodic firing", conn, ledger.runs(path), enqueued, **{
            "outage s": round((took_over - cut_at).total_seconds()), "every_second slots": span,
            "fired twice": twice, "missed": missed, "missed slots fired late (all)": late,
            "burst fired (all)": len(burst_all), "burst fired (latest)": len(burst_latest)})
    print(f"the lead moved from {leader} to {new_leader}")
    assert new_leader != leader
    assert (took_over - cut_at).total_seconds() >= OUTAGE - 1  # nobody fired while the lock was held
    assert (counts["lost"], counts["overlapping runs"], counts["recorded done"]) == (0, 0, enqueued)
    assert (twice, missed) == (0, 0)  # every second of the outage fired, once
    assert late >= OUTAGE - ON_TIME_GRACE.total_seconds() - 2  # the slots missed by more than the grace too
    assert burst_all == slots  # catch_up="all": every missed slot, once
    assert burst_latest == slots[-1:] and latest_missed == [True]  # catch_up="latest": the latest missed slot only
