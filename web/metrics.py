"""``/metrics`` (JSON, the seed's fields) and ``/metrics/prometheus`` (the exposition
format), both read from the database at request time by :func:`jobq.observe.metrics.snapshot`.

The Prometheus side is a custom collector on a registry of its own, so every Gunicorn
worker serves the same database-wide values and no multiprocess directory is needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobq.limits import list_limits, queue_limits
from jobq.observe.metrics import Metrics, Quantiles, snapshot
from web.context import api
from web.blueprints import resource
from web.schemas import MetricsOut

metrics = resource("metrics", __name__, "Queue metrics, read from the database at each request")

PROMETHEUS_TEXT = {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}


def read() -> Metrics:
    """The metrics now, through the app's pool."""
    with api().database.connection() as conn:
        return snapshot(stale_seconds=api().settings.stale_threshold, conn=conn)


@metrics.get("/metrics", responses={200: MetricsOut})
def as_json() -> dict:
    """Queue depth per status, active workers, throughput, error rate, run time, totals."""
    return read().to_dict()


@metrics.get("/metrics/prometheus", responses={200: PROMETHEUS_TEXT})
def as_prometheus() -> Response:
    """The same metrics in the Prometheus text format (`taskqueue_*`)."""
    return Response(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class DatabaseCollector(Collector):
    """Reads the metrics at each scrape and yields them under the seed's names
    (``taskqueue_*``), every status and every queue present, zeros included, so a
    series that drops to zero reads zero."""

    def __init__(self, read: Callable[[], Metrics]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        m = self.read()
        scopes = {"": m, **m.queues}  # "" labels the whole queue where a queue label is used
        depth = GaugeMetricFamily("taskqueue_queue_depth", "Jobs in each status now", labels=["status", "queue"])
        for queue, figures in m.queues.items():
            for status, n in figures.queue_depth.items():
                depth.add_metric([status, queue], n)
        yield depth
        paused = GaugeMetricFamily("taskqueue_queue_paused", "1 while the queue is paused, else 0", labels=["queue"])
        for queue, figures in m.queues.items():
            paused.add_metric([queue], 1 if figures.paused else 0)
        yield paused
        yield _gauge("taskqueue_active_workers", "Worker processes with a fresh heartbeat", m.active_workers)
        yield _gauge("taskqueue_running_jobs", "Jobs running now", m.running_jobs)
        totals = CounterMetricFamily("taskqueue_jobs", "Jobs by outcome since the start (monotonic)", labels=["status"])
        for status, n in m.jobs_total.items():
            totals.add_metric([status], n)
        yield totals
        yield _summary("taskqueue_execution_seconds", "Run time (started -> completed), trailing window", m)
        yield _quantiles("taskqueue_start_latency_seconds", "run_at -> started, trailing window", m.start_latency_seconds)
        yield _gauge("taskqueue_jobs_per_second", "Completions per second, trailing window", m.jobs_per_second)
        yield _gauge("taskqueue_error_rate", "Failed runs / finished runs, trailing window", m.error_rate)
        oldest = GaugeMetricFamily(
            "taskqueue_oldest_pending_age_seconds", "How long the oldest due pending job has waited", labels=["queue"]
        )
        for queue, figures in scopes.items():
            oldest.add_metric([queue], figures.oldest_pending_age_seconds or 0.0)
        yield oldest
        yield _gauge("taskqueue_dead_letter_count", "Dead letters not replayed", m.dead_letter_count)
        yield CounterMetricFamily("taskqueue_reclaimed", "Jobs taken back from lost workers", value=m.reclaimed_total)
        yield CounterMetricFamily("taskqueue_timeouts", "Jobs killed at their timeout", value=m.timeouts_total)
        yield CounterMetricFamily(
            "taskqueue_stale_lease_rejections", "Outcome writes rejected for a stale lease", value=m.stale_lease_rejections_total
        )
        yield from _schedules(m)


def _schedules(m: Metrics) -> Iterator[Metric]:
    """Per schedule: seconds since its latest slot fired (NaN before its first), to alert
    on one that stopped firing, and whether it is paused, to leave those out."""
    age = GaugeMetricFamily(
        "taskqueue_schedule_last_run_age_seconds", "Seconds since the schedule's latest slot fired", labels=["schedule"]
    )
    paused = GaugeMetricFamily("taskqueue_schedule_paused", "1 while an operator has the schedule paused", labels=["schedule"])
    for name, item in m.schedules.get("items", {}).items():
        last = item["last_run_age_seconds"]
        age.add_metric([name], math.nan if last is None else last)
        paused.add_metric([name], 1 if item["paused"] else 0)
    yield age
    yield paused


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _quantiles(name: str, documentation: str, q: Quantiles) -> Metric:
    """A summary of quantiles only (NaN where the window is empty)."""
    family = Metric(name, documentation, "summary")
    for label, value in (("0.5", q.p50), ("0.95", q.p95), ("0.99", q.p99)):
        family.add_sample(name, {"quantile": label}, math.nan if value is None else value)
    return family


def _summary(name: str, documentation: str, m: Metrics) -> Metric:
    family = _quantiles(name, documentation, m.execution_seconds)
    family.add_sample(name + "_count", {}, m.execution_seconds_count)
    family.add_sample(name + "_sum", {}, m.execution_seconds_sum)
    return family


class LimitsCollector(Collector):
    """Flow control at each scrape, labelled by rule (``queue <name>``, ``key <pattern>``):
    ``taskqueue_limit_in_use`` (slots taken) and ``taskqueue_limit_held_jobs`` (due jobs
    waiting while every slot of their queue or key is taken)."""

    def collect(self) -> Iterator[Metric]:
        with api().database.connection() as conn:
            rules, queues = list_limits(conn=conn), queue_limits(conn=conn)
        in_use = GaugeMetricFamily("taskqueue_limit_in_use", "Slots of the limit taken now", labels=["rule"])
        held = GaugeMetricFamily("taskqueue_limit_held_jobs", "Due jobs held back by the limit", labels=["rule"])
        for label, limit in [(f"queue {q.queue}", q) for q in queues] + [(f"key {r.pattern}", r) for r in rules]:
            in_use.add_metric([label], limit.in_use)
            held.add_metric([label], limit.held)
        yield in_use
        yield held


# Registered without describing (which would collect): nothing is read until a scrape.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(DatabaseCollector(read))
REGISTRY.register(LimitsCollector())
