"""What /metrics and Prometheus say of paused queues and cancelled jobs."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobq
from jobq.jobs import queues

pytestmark = [pytest.mark.db, pytest.mark.control]


@pytest.fixture
def paused_and_cancelled(conn):
    """held: paused, one job due for 60 s; mail: one job due for 5 s, one cancelled."""
    jobq.enqueue("noop", queue="held", conn=conn)
    jobq.enqueue("noop", queue="mail", conn=conn)
    conn.execute("UPDATE jobs SET run_at = now() - make_interval(secs => CASE queue WHEN 'held' THEN 60 ELSE 5 END)")
    jobq.cancel(jobq.enqueue("noop", queue="mail", conn=conn).id, conn=conn)
    queues.pause("held", conn=conn)
    queues.pause("empty", conn=conn)


def test_json_metrics_say_which_queues_are_paused_and_count_cancelled_jobs(client, paused_and_cancelled):
    m = client.get("/metrics").get_json()
    assert {q: figures["paused"] for q, figures in m["queues"].items()} == {
        "default": False, "empty": True, "held": True, "mail": False,
    }
    assert m["queue_depth"]["cancelled"] == 1 and m["queues"]["mail"]["queue_depth"]["cancelled"] == 1
    assert "paused" not in m  # the whole queue is not paused or running: its queues are
    # A paused queue's jobs wait on purpose: its own age shows, the whole queue's leaves it out.
    assert m["queues"]["held"]["oldest_pending_age_seconds"] >= 60
    assert 5 <= m["oldest_pending_age_seconds"] < 60


def test_prometheus_has_a_paused_gauge_per_queue_and_the_cancelled_depth(client, paused_and_cancelled):
    text = client.get("/metrics/prometheus").get_data(as_text=True)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    paused = {s.labels["queue"]: s.value for s in families["taskqueue_queue_paused"].samples}
    assert paused == {"default": 0.0, "empty": 1.0, "held": 1.0, "mail": 0.0}
    depth = {(s.labels["queue"], s.labels["status"]): s.value for s in families["taskqueue_queue_depth"].samples}
    assert depth[("mail", "cancelled")] == 1.0 and depth[("held", "cancelled")] == 0.0
    assert {status for _, status in depth} == set(jobq.STATUSES)
