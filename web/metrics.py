"""``/metrics`` (JSON, the seed's fields) and ``/metrics/prometheus`` (the exposition
format), both read from the database at request time by :func:`jobq.metrics.snapshot`.

The Prometheus side is a custom collector on a registry of its own, so every Gunicorn
worker serves the same database-wide values and no multiprocess directory is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobq.metrics import Metrics, snapshot
from web.context import api
from web.schemas import MetricsOut, resource

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
    """Reads the metrics at each scrape and yields them under the seed's names."""

    def __init__(self, read: Callable[[], Metrics]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        m = self.read()
        depth = GaugeMetricFamily("taskqueue_queue_depth", "Jobs in each status now", labels=["status"])
        for status, n in m.queue_depth.items():
            depth.add_metric([status], n)
        yield depth
        yield GaugeMetricFamily(
            "taskqueue_active_workers", "Worker processes with a fresh heartbeat", value=m.active_workers
        )
        yield GaugeMetricFamily("taskqueue_jobs_per_second", "Completions per second (trailing)", m.jobs_per_second)
        yield GaugeMetricFamily("taskqueue_error_rate", "Failed runs / finished runs, trailing window", m.error_rate)
        if m.avg_execution_seconds is not None:
            yield GaugeMetricFamily(
                "taskqueue_avg_execution_seconds", "Mean run time, trailing window", value=m.avg_execution_seconds
            )
        yield CounterMetricFamily("taskqueue_jobs_enqueued", "Jobs ever enqueued", value=m.total_jobs)
        yield GaugeMetricFamily("taskqueue_dead_letter_count", "Dead letters not replayed", value=m.dead_letter_count)


# Registered without describing (which would collect): nothing is read until a scrape.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(DatabaseCollector(read))
