"""Queue metrics, computed from the database when asked: :func:`snapshot`.

Every value comes from a bounded read, whatever the size of the ``jobs`` table, so a
scrape costs the same with a million finished jobs as with none:

- depth and totals from ``job_counters`` (exact, kept by triggers);
- rates (``jobs_per_second``, ``error_rate``) from the difference between the live
  totals and the sample the maintenance leader took a window ago
  (``job_counter_samples``);
- run times and start latencies from the most recent completions in the window (at
  most RECENT_ROWS, read backwards along ``jobs_completed_idx``);
- the oldest due pending job from one index probe per queue;
- which queues are paused from ``jobq_queues`` (a few rows).
- periodic schedules from ``jobq_schedules`` (a row per schedule).

The statements go in one pipeline: one round trip. The web app's ``/metrics`` and
``/metrics/prometheus`` render the same :class:`Metrics`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jobq.store.sql.counters import COUNTER_SAMPLE_BASELINE
from jobq.store.sql.dead_letters import DEAD_LETTER_COUNT_WAITING_BY_QUEUE
from jobq.store.sql.ledger import JOB_LIST_RECENT_RUN_TIMES
from jobq.store.sql.queues import JOB_GET_OLDEST_DUE, QUEUE_LIST
from jobq.store.sql.workers import WORKER_LIST_ACTIVE_QUEUES
from jobq.schedules import stored as stored_schedules
from jobq.store.connections import Connection, connection
from jobq.job import STATUSES
from jobq.jobs.ledger import Counts, counts
from jobq.spec import DEFAULT_QUEUE

WINDOW = 60.0  # seconds: the trailing window of rates, run times and latencies
RECENT_ROWS = 2000  # most completions read for run times and latencies
MIN_RATE_SPAN = 1.0  # a rate over a shorter history than this is not reported

EVENT_TOTALS = ("reclaimed_total", "timeouts_total", "stale_lease_rejections_total")


@dataclass(frozen=True, slots=True)
class Quantiles:
    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: list[float]) -> Quantiles:
        if not values:
            return cls(None, None, None)
        if len(values) == 1:
            return cls(values[0], values[0], values[0])
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(cuts[49], cuts[94], cuts[98])


@dataclass(frozen=True)
class Figures:
    """The metrics of one scope: the whole queue, or one named queue."""

    queue_depth: dict[str, int]
    """Jobs in each of the seven statuses now, zeros included (exact)."""
    active_workers: int
    """Worker processes with a fresh heartbeat (serving this queue)."""
    running_jobs: int
    jobs_per_second: float
    """Completions (done) in the trailing window, per second."""
    error_rate: float
    """Failed runs / finished runs (done + failed) in the trailing window; 0 without runs."""
    avg_execution_seconds: float | None
    """Mean started -> completed of the jobs done in the window; None without any."""
    execution_seconds: Quantiles
    start_latency_seconds: Quantiles
    """run_at (created_at for jobs due at once) -> started, jobs done in the window."""
    oldest_pending_age_seconds: float | None
    """How long the oldest due pending job has been due; None when nothing is due. For
    the whole queue, of the queues not paused: a paused queue's jobs wait on purpose."""
    total_jobs: int
    """Jobs ever enqueued (monotonic; an enqueue counts at once)."""
    dead_letter_count: int
    """Dead letters not replayed."""
    reclaimed_total: int
    timeouts_total: int
    stale_lease_rejections_total: int
    jobs_total: dict[str, int]
    """Monotonic totals by outcome: enqueued, done, failed (runs), dead."""
    execution_seconds_sum: float
    execution_seconds_count: int


@dataclass(frozen=True)
class QueueFigures(Figures):
    """The metrics of one named queue, and whether it is paused (jobq.jobs.queues)."""

    paused: bool = False


@dataclass(frozen=True)
class Metrics(Figures):
    """The whole queue, with a breakdown per queue and per type."""

    queues: dict[str, QueueFigures] = dataclasses.field(default_factory=dict)
    types: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per job type: depth per status and totals (exact, from the counters)."""
    window_seconds: float = WINDOW
    schedules: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Periodic schedules: count, paused, orphaned, and per name its next and last run and
    last job's status (:func:`jobq.schedules.stored.summary`)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class _Window:
    """Raw trailing-window readings of one scope."""

    span: float = 0.0  # seconds between the baseline sample and now
    done: int = 0
    failed_runs: int = 0
    run_times: list[float] = dataclasses.field(default_factory=list)
    latencies: list[float] = dataclasses.field(default_factory=list)


def snapshot(*, stale_seconds: float, window: float = WINDOW, conn: Connection | None = None) -> Metrics:
    """Read the metrics now, in one round trip. ``stale_seconds`` is the heartbeat age
    past which a worker no longer counts (JOBQ_STALE_THRESHOLD). Raises
    DatabaseUnavailable."""
    with connection(conn) as c:
        with c.pipeline():
            cur_samples = c.execute(COUNTER_SAMPLE_BASELINE, {"window": window})
            cur_runs = c.execute(JOB_LIST_RECENT_RUN_TIMES, {"window": window, "limit": RECENT_ROWS})
            cur_workers = c.execute(WORKER_LIST_ACTIVE_QUEUES, {"stale_seconds": stale_seconds})
            cur_dead = c.execute(DEAD_LETTER_COUNT_WAITING_BY_QUEUE)
            cur_paused = c.execute(QUEUE_LIST)
            reading = counts(conn=c)
            pending = [q for q, d in reading.queues.items() if d.get("pending")]
            cur_oldest = c.execute(JOB_GET_OLDEST_DUE, {"queues": pending})
            cur_schedules = stored_schedules.cursor_of_all(c, stale_seconds=stale_seconds)
            samples, runs = cur_samples.fetchall(), cur_runs.fetchall()
            worker_queues = cur_workers.fetchall()  # (queues, serves every queue)
            dead = {queue: int(n) for queue, n in cur_dead.fetchall()}
            paused = {name for name, paused_at, _, _ in cur_paused.fetchall() if paused_at is not None}
            oldest = {queue: age for _, _, queue, _, age in cur_oldest.fetchall()}
            schedule_rows = cur_schedules.fetchall()
    windows = _windows(reading, samples, runs)
    queue_names = sorted(set(reading.queues) | set(dead) | paused | {DEFAULT_QUEUE})  # the default queue always shows
    per_queue = {
        q: QueueFigures(
            **_fields(
                _figures(
                    reading.queues.get(q, {}),
                    windows.get(q, _Window()),
                    active=sum(1 for queues, every in worker_queues if every or q in queues),
                    oldest=oldest.get(q),
                    dead=dead.get(q, 0),
                )
            ),
            paused=q in paused,
        )
        for q in queue_names
    }
    overall = _figures(
        {**dict(reading.totals), **reading.depth},
        windows.get(None, _Window()),
        active=len(worker_queues),
        oldest=max((age for q, age in oldest.items() if q not in paused), default=None),
        dead=sum(dead.values()),
    )
    return Metrics(
        **_fields(overall),
        queues=per_queue,
        types={t: {name: n for name, n in sorted(values.items())} for t, values in sorted(reading.types.items())},
        window_seconds=window,
        schedules=stored_schedules.summary(schedule_rows),
    )


def _fields(figures: Figures) -> dict[str, Any]:
    """The fields of Figures, to build a subclass from (shallow: no copy)."""
    return {f.name: getattr(figures, f.name) for f in dataclasses.fields(Figures)}


def _windows(reading: Counts, samples: Iterable[tuple], runs: Iterable[tuple]) -> dict[str | None, _Window]:
    """Trailing-window readings per queue and overall (key None)."""
    base: dict[tuple[str, str], int] = {}
    span = 0.0
    for queue, name, n, age in samples:
        base[(queue, name)] = int(n)
        span = float(age)
    windows: dict[str | None, _Window] = defaultdict(lambda: _Window(span=span))
    if span >= MIN_RATE_SPAN:
        for queue, values in reading.queues.items():
            done = values.get("done_total", 0) - base.get((queue, "done_total"), 0)
            failed = values.get("failed_runs_total", 0) - base.get((queue, "failed_runs_total"), 0)
            for key in (queue, None):
                windows[key].done += done
                windows[key].failed_runs += failed
    for queue, run_time, latency in runs:
        for key in (queue, None):
            windows[key].run_times.append(max(0.0, run_time))
            windows[key].latencies.append(max(0.0, latency))
    return windows


def _figures(values: dict[str, int], window: _Window, *, active: int, oldest: float | None, dead: int) -> Figures:
    depth = {status: int(values.get(status, 0)) for status in STATUSES}
    span = window.span
    finished = window.done + window.failed_runs
    runs = window.run_times
    return Figures(
        queue_depth=depth,
        active_workers=active,
        running_jobs=depth["running"],
        jobs_per_second=round(window.done / span, 3) if span >= MIN_RATE_SPAN else 0.0,
        error_rate=round(window.failed_runs / finished, 4) if finished else 0.0,
        avg_execution_seconds=statistics.fmean(runs) if runs else None,
        execution_seconds=Quantiles.of(runs),
        start_latency_seconds=Quantiles.of(window.latencies),
        oldest_pending_age_seconds=oldest,
        total_jobs=int(values.get("enqueued_total", 0)),
        dead_letter_count=dead,
        **{name: int(values.get(name, 0)) for name in EVENT_TOTALS},  # type: ignore[arg-type]
        jobs_total={
            "enqueued": int(values.get("enqueued_total", 0)),
            "done": int(values.get("done_total", 0)),
            "failed": int(values.get("failed_runs_total", 0)),
            "dead": int(values.get("dead_total", 0)),
        },
        execution_seconds_sum=sum(runs),
        execution_seconds_count=len(runs),
    )
