"""The per-minute rollup (jobq.observe.rollup, table jobq_minutes): what the leader writes for a
minute from the jobs that finished in it and the counter samples, once per minute
whatever the number of leaders, the minutes it catches up, its retention, the series
the dashboard reads (gaps filled), and GET /stats."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

import pytest

from support.api import assert_error
from support.rows import insert_jobs
from support.waiting import wait_for
from jobq.observe import rollup
from jobq.errors import ConfigError, InvalidArgument
from jobq.settings import Settings

pytestmark = pytest.mark.dashboard

MINUTE = timedelta(minutes=1)
T = TypeVar("T")


def db_now(conn) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


def floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def shown_last(conn) -> datetime:
    """The newest minute series() shows by the database's clock now."""
    return floor(db_now(conn) - rollup.SHOWN_LAG) - MINUTE


def shown_around(conn, call: Callable[[], T]) -> tuple[T, set[datetime]]:
    """``call()``, and the newest minute series() shows by the database's clock just before
    and just after it: one minute, or two when a minute turned meanwhile. A test checks the
    minute its call ended on against these, and its rows by minute, so that it needs no
    wait for a minute to turn (its rows, a minute or more before, are shown either way)."""
    before = shown_last(conn)
    result = call()
    return result, {before, shown_last(conn)}


def finish(conn, status: str, minute: datetime, at: float, *, run: float = 1.0, wait: float = 0.0, queue="a", n=1):
    """``n`` jobs of ``queue`` finished in ``status`` at ``minute`` + ``at`` seconds, having
    run ``run`` seconds after waiting ``wait`` seconds past their run_at."""
    completed = minute + timedelta(seconds=at)
    started = completed - timedelta(seconds=run)
    insert_jobs(conn, n, status, type="noop", queue=queue, run_at=started - timedelta(seconds=wait), started_at=started,
                completed_at=completed)


def sample(conn, at: datetime, **failed_runs: int) -> None:
    """A counter sample at ``at`` with these failed_runs_total per queue (and its marker row)."""
    conn.execute("INSERT INTO job_counter_samples VALUES (%s, '', '', 'sample', 0)", (at,))
    for queue, n in failed_runs.items():
        conn.execute("INSERT INTO job_counter_samples VALUES (%s, %s, 'noop', 'failed_runs_total', %s)", (at, queue, n))


def rows(conn, queue: str | None = None) -> dict:
    """(minute, queue) -> the row's columns but the key, by name."""
    found = conn.execute(
        "SELECT minute, queue, completed, failed, dead, cancelled, pending, running, run_p50, run_p95, run_p99, "
        "latency_p50, latency_p95, latency_p99 FROM jobq_minutes ORDER BY minute, queue"
    )
    names = [c.name for c in found.description]
    return {(r[0], r[1]): dict(zip(names[2:], r[2:])) for r in found if queue is None or r[1] == queue}


def marker(conn, minute: datetime) -> None:
    """A row of all queues at ``minute``: the rollup goes on from there."""
    conn.execute(
        "INSERT INTO jobq_minutes (minute, queue, completed, failed, dead, cancelled) VALUES (%s, '', 0, 0, 0, 0)",
        (minute,),
    )


def test_percentiles_of_a_busy_minute_are_taken_over_every_kth_job_and_the_counts_stay_exact(conn, monkeypatch):
    monkeypatch.setattr(rollup, "PERCENTILE_SAMPLE", 2)
    minute = floor(db_now(conn)) - 3 * MINUTE
    finish(conn, "done", minute, 10, n=5)  # 5 done: the next minute samples every 3rd
    rollup.take(conn, now=minute + MINUTE + timedelta(seconds=10))
    busy = minute + MINUTE
    finish(conn, "done", busy, 10, run=1.0, n=9)
    conn.execute(  # the sampled jobs ran 100 s, the others 1 s
        "UPDATE jobs SET started_at = completed_at - interval '100 s' "
        "WHERE id %% 3 = 0 AND completed_at >= %s AND completed_at < %s", (busy, busy + MINUTE),
    )
    finish(conn, "done", busy, 20, run=7.0, queue="b")  # a queue new in the minute: exact
    rollup.take(conn, now=busy + MINUTE + timedelta(seconds=10))
    a, b = rows(conn)[(busy, "a")], rows(conn)[(busy, "b")]
    assert (a["completed"], a["run_p50"], a["run_p99"]) == (9, pytest.approx(100.0), pytest.approx(100.0))
    assert (b["completed"], b["run_p50"]) == (1, pytest.approx(7.0))
    assert rows(conn)[(busy, "")]["completed"] == 10


def test_a_minute_is_rolled_up_from_its_finished_jobs_its_samples_and_the_depth(conn):
    minute = floor(db_now(conn)) - 3 * MINUTE
    for i, run in enumerate([1.0, 2.0, 3.0, 4.0]):
        finish(conn, "done", minute, 10 + i, run=run, wait=0.5 * (i + 1))
    finish(conn, "done", minute, 59.9, run=10.0, wait=3.0, queue="b")
    finish(conn, "dead", minute, 20, queue="b")
    finish(conn, "cancelled", minute, 30, queue="b")
    finish(conn, "done", minute - MINUTE, 59.99)  # the minutes around it are not this one
    finish(conn, "done", minute + MINUTE, 0)
    insert_jobs(conn, 2, type="noop", queue="a")  # pending
    sample(conn, minute - timedelta(seconds=3), a=5)
    sample(conn, minute + timedelta(seconds=27), a=6, b=1)
    sample(conn, minute + timedelta(seconds=57), a=8, b=2)  # the minute's newest sample counts
    assert rollup.take(conn, now=minute + MINUTE + timedelta(seconds=10)) == 3  # a, b, and all
    written = rows(conn)
    a, b, everything = written[(minute, "a")], written[(minute, "b")], written[(minute, "")]
    assert (a["completed"], a["failed"], a["dead"], a["cancelled"], a["pending"], a["running"]) == (4, 3, 0, 0, 2, 0)
    assert (b["completed"], b["failed"], b["dead"], b["cancelled"], b["pending"]) == (1, 2, 1, 1, 0)
    assert (everything["completed"], everything["failed"], everything["dead"], everything["cancelled"]) == (5, 5, 1, 1)
    assert everything["pending"] == 2
    # percentile_cont of 1, 2, 3, 4 s: positions 1.5, 2.85, 2.97
    assert (a["run_p50"], a["run_p95"], a["run_p99"]) == pytest.approx((2.5, 3.85, 3.97))
    assert (a["latency_p50"], a["latency_p95"], a["latency_p99"]) == pytest.approx((1.25, 1.925, 1.985))
    assert (b["run_p50"], b["latency_p99"]) == pytest.approx((10.0, 3.0))
    # all queues: exact percentiles of the five jobs done (1, 2, 3, 4, 10 s), not a blend
    assert (everything["run_p50"], everything["run_p95"]) == pytest.approx((3.0, 8.8))
    # no job done, no percentile
    finish(conn, "dead", minute + MINUTE, 5, queue="c")
    rollup.take(conn, now=minute + 2 * MINUTE + timedelta(seconds=10))
    c = rows(conn)[(minute + MINUTE, "c")]
    assert (c["dead"], c["completed"], c["run_p50"], c["latency_p50"]) == (1, 0, None, None)


def test_a_minute_is_not_rolled_up_before_it_has_settled(conn):
    minute = floor(db_now(conn)) - 2 * MINUTE
    assert rollup.take(conn, now=minute + MINUTE + rollup.SETTLE - timedelta(seconds=0.5)) == 1  # the one before
    assert set(rows(conn)) == {(minute - MINUTE, "")}
    assert rollup.take(conn, now=minute + MINUTE + rollup.SETTLE) == 1
    assert set(rows(conn)) == {(minute - MINUTE, ""), (minute, "")}


def test_each_minute_is_written_once_whatever_the_number_of_leaders(conn, database_url):
    import psycopg

    minute = floor(db_now(conn)) - 3 * MINUTE
    finish(conn, "done", minute, 30, n=3)
    now = minute + MINUTE + timedelta(seconds=10)
    assert rollup.take(conn, now=now) == 2
    assert rollup.take(conn, now=now) == 0  # a restart: nothing due twice
    first = rows(conn)
    # A second leader that read the progress before the first one wrote (failover):
    # it writes what is missing and leaves what is there.
    conn.execute("DELETE FROM jobq_minutes WHERE queue = ''")
    finish(conn, "done", minute, 31, n=5)  # what the second leader would count differently
    with psycopg.connect(database_url, autocommit=True) as other:
        assert rollup.take(other, now=now) == 1  # only the row of all queues was missing
    again = rows(conn)
    assert again[(minute, "a")] == first[(minute, "a")]
    assert again[(minute, "a")]["completed"] == 3
    assert conn.execute("SELECT count(*) FROM jobq_minutes").fetchone()[0] == 2


def test_missed_minutes_are_caught_up_a_pass_at_a_time_and_not_beyond_a_day(conn):
    now = floor(db_now(conn)) + timedelta(seconds=30)
    last = floor(now) - 41 * MINUTE  # 40 whole minutes missed, then the one running now
    marker(conn, last)
    finish(conn, "done", last + 20 * MINUTE, 5, n=7)
    insert_jobs(conn, type="noop", queue="a")
    written = 0
    while (n := rollup.take(conn, now=now)) > 0:
        assert n <= rollup.MINUTES_PER_PASS * 2  # a and all, per minute
        written += n
    minutes = sorted(m for (m, q) in rows(conn) if q == "")
    assert minutes == [last + i * MINUTE for i in range(41)]
    assert rows(conn)[(last + 20 * MINUTE, "a")]["completed"] == 7
    # Depth is known only for the minute rolled up right after its end.
    depths = {m: r["pending"] for (m, q), r in rows(conn).items() if q == "a"}
    assert depths.pop(floor(now) - MINUTE) == 1
    assert set(depths.values()) == {None}
    assert written == 40 * 2
    # A leader away for two days starts a day back.
    conn.execute("TRUNCATE jobq_minutes")
    marker(conn, floor(now) - timedelta(days=2))
    rollup.take(conn, now=now)
    assert min(m for (m, q) in rows(conn) if m > floor(now) - timedelta(days=2)) == floor(now) - rollup.CATCH_UP


def test_prune_forgets_minutes_older_than_the_retention(conn):
    now = floor(db_now(conn))
    for minute in (now - timedelta(hours=3), now - timedelta(minutes=59), now - MINUTE):
        marker(conn, minute)
    assert rollup.prune(conn, timedelta(hours=1)) == 1
    assert sorted(m for (m, _) in rows(conn)) == [now - timedelta(minutes=59), now - MINUTE]


def test_series_has_a_point_per_minute_gaps_filled_for_all_queues_or_one(conn):
    last = shown_last(conn)
    finish(conn, "done", last - 5 * MINUTE, 1, run=2.0, n=4)
    finish(conn, "done", last - 5 * MINUTE, 2, run=4.0, queue="b")
    finish(conn, "done", last, 30, n=2, queue="b")
    insert_jobs(conn, type="noop", queue="b")
    marker(conn, last - 7 * MINUTE)
    rollup.take(conn, now=last + MINUTE + timedelta(seconds=6))
    points, shown = shown_around(conn, lambda: rollup.series("15m", conn=conn))
    end = points[-1].minute
    assert end in shown and [p.minute for p in points] == [end - (14 - i) * MINUTE for i in range(15)]
    by_minute = {p.minute: p for p in points}
    assert (by_minute[last - 5 * MINUTE].completed, by_minute[last - 5 * MINUTE].run_p50) == (5, pytest.approx(2.0))
    assert (by_minute[last].completed, by_minute[last].pending) == (2, 1)
    assert by_minute[last - 10 * MINUTE] == rollup.Point.empty(last - 10 * MINUTE)  # no row: zeros
    assert by_minute[last - 4 * MINUTE].completed == 0 and by_minute[last - 4 * MINUTE].run_p50 is None
    only_b = {p.minute: p for p in rollup.series("15m", queue="b", conn=conn)}
    assert (only_b[last - 5 * MINUTE].completed, only_b[last - 5 * MINUTE].run_p50) == (1, pytest.approx(4.0))
    assert sum(p.completed for p in rollup.series("1h", queue="a", conn=conn)) == 4
    assert sum(p.completed for p in rollup.series("1h", queue="nobody", conn=conn)) == 0
    day, shown = shown_around(conn, lambda: rollup.series("24h"))  # the default pool works too
    assert len(day) == 1440 and day[-1].minute in shown and sum(p.completed for p in day) == 7


@pytest.mark.parametrize("window", ["1d", "", "15M", None, 15])
def test_series_refuses_an_unknown_window_naming_it(conn, window):
    with pytest.raises(InvalidArgument) as refused:
        rollup.series(window, conn=conn)
    assert refused.value.field == "window"
    with pytest.raises(InvalidArgument) as refused:
        rollup.series("15m", queue="", conn=conn)
    assert refused.value.field == "queue"


def test_the_retention_is_two_days_unless_set_and_less_than_a_day_names_its_variable():
    assert Settings.from_env({}).rollup_retention == 2 * 86400
    assert Settings.from_env({"JOBQ_ROLLUP_RETENTION": "604800"}).rollup_retention == 604800
    for bad in ("3600", "nan", "a day"):
        with pytest.raises(ConfigError) as caught:
            Settings.from_env({"JOBQ_ROLLUP_RETENTION": bad})
        assert caught.value.variable == "JOBQ_ROLLUP_RETENTION"


def test_get_stats_answers_the_series_and_a_400_naming_a_bad_parameter(client, conn):
    last = shown_last(conn)
    finish(conn, "done", last, 30, run=3.0, n=2, queue="mail")
    marker(conn, last - MINUTE)
    rollup.take(conn, now=last + MINUTE + timedelta(seconds=6))
    reply, shown = shown_around(conn, lambda: client.get("/stats?window=1h&queue=mail"))
    assert reply.status_code == 200, reply.data
    body = reply.get_json()
    assert (body["window"], body["queue"], len(body["points"])) == ("1h", "mail", 60)
    assert datetime.fromisoformat(body["points"][-1]["minute"]) in shown  # the newest minute shown
    newest = {datetime.fromisoformat(p["minute"]): p for p in body["points"]}[last]
    assert (newest["completed"], newest["run_p50"], newest["latency_p99"]) == (2, 3.0, 0.0)
    assert len(client.get("/stats").get_json()["points"]) == 15  # 15m unless asked
    for query, field in (("window=2d", "window"), ("window=", "window"), ("queue=", "queue"),
                         ("queue=" + "q" * 101, "queue")):
        detail = assert_error(client.get("/stats?" + query), 400)
        assert field in str(detail), (query, detail)


def test_the_maintenance_leader_rolls_up_minutes(daemon, conn):
    last = floor(db_now(conn)) - 4 * MINUTE
    marker(conn, last)
    finish(conn, "done", last + MINUTE, 15, run=2.0, n=3, queue="default")
    daemon(1)
    wait_for(lambda: rows(conn).get((last + MINUTE, "default")), 30, "the leader's rollup of a minute")
    assert rows(conn)[(last + MINUTE, "default")]["completed"] == 3
    assert rows(conn)[(last + MINUTE, "")]["run_p50"] == pytest.approx(2.0)
    assert all((last + i * MINUTE, "") in rows(conn) for i in (1, 2))  # the minutes since, as far as due
