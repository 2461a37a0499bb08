"""Metrics that tell the truth: checked against a known set of jobs in every state; and
what /metrics and Prometheus say of paused queues and cancelled jobs."""

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobq
from jobq.jobs import leases
from jobq.jobs import queues
from jobq.observe import metrics
from jobq.observe import samples as metrics_samples
from jobq.daemon import presence
from jobq.daemon.maintenance import reaper
from jobq.daemon import messages
from jobq.store.retention import prune
from jobq.settings import Settings
from support.claims import LOCK_BASE, claim, complete, fail

pytestmark = pytest.mark.db

SETTINGS = Settings.from_env({}, backoff_base=600)


def ground_truth_depth(conn) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())


@pytest.fixture
def known(conn, database_url):
    """Jobs in every state, with known run times, a sample 30 s before the changes, two
    workers (one stale), one reclaim and one timeout. Returns what the test must see."""
    metrics_samples.take(conn)
    conn.execute("UPDATE job_counter_samples SET at = now() - interval '30 seconds'")

    # 3 done, run times 1, 2, 3 s, each started 0.5 s after it was due
    done = jobq.enqueue_many([{"type": "noop"}] * 3, conn=conn)
    complete(conn, claim(conn, 3))
    for seconds, job in enumerate(done, start=1):
        conn.execute(
            "UPDATE jobs SET started_at = completed_at - make_interval(secs => %s), "
            "run_at = completed_at - make_interval(secs => %s) - interval '0.5 s' WHERE id = %s",
            (seconds, seconds, job.id),
        )
    # 1 dead (with its dead letter) and 1 retry scheduled in 10 minutes: two failed runs
    jobq.enqueue_many([{"type": "x", "max_retries": 0}, {"type": "x", "max_retries": 1}], conn=conn)
    fail(conn, claim(conn, 2), delay=600)
    # 1 claimed, 1 running
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    first, _ = claim(conn, 2)
    leases.start(conn, [first], [0.0]).result()
    # lost workers: a claimed job taken back by the reaper, a running job timed out
    with psycopg.connect(database_url, autocommit=True) as lost:
        jobq.enqueue_many([{"type": "noop", "priority": 10}] * 2, conn=conn)
        taken_back, timed_out = claim(lost, 2, worker_id="gone:1:x")
        leases.start(lost, [timed_out], [0.0]).result()
        lost_pid = lost.info.backend_pid
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (lost_pid,)).fetchone():
        pass
    gone = messages.Gone("gone:1:x", timed_out.job.id, timed_out.lease, "timeout", 5, "")
    reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    conn.execute("UPDATE jobs SET run_at = now() + interval '1 hour' WHERE id = %s", (taken_back.job.id,))
    # pending: one due in mail for 10 s, one far in the future
    jobq.enqueue("noop", queue="mail", run_at=None, conn=conn)
    conn.execute("UPDATE jobs SET run_at = now() - interval '10 seconds', created_at = now() - interval '10 seconds' WHERE queue = 'mail'")
    jobq.enqueue("noop", run_at=None, conn=conn)
    conn.execute("UPDATE jobs SET run_at = now() + interval '1 day' WHERE id = (SELECT max(id) FROM jobs)")
    # workers: one fresh, one stale
    presence.register(conn, "host:1:a", "host", 1, ["default", "mail"])
    presence.register(conn, "host:2:b", "host", 2, ["default"])
    conn.execute("UPDATE workers SET heartbeat_at = now() - interval '1 hour' WHERE id = 'host:2:b'")
    return {"enqueued": 11, "failed_runs": 3}


def test_json_metrics_match_the_known_jobs(conn, known):
    m = metrics.snapshot(stale_seconds=30, conn=conn)
    truth = ground_truth_depth(conn)
    assert m.queue_depth == {s: truth.get(s, 0) for s in jobq.STATUSES}
    assert (m.queue_depth["claimed"], m.queue_depth["running"], m.queue_depth["done"], m.queue_depth["dead"]) == (1, 1, 3, 1)
    assert m.running_jobs == 1 and m.active_workers == 1
    assert 3 / 32 <= m.jobs_per_second <= 3 / 29  # 3 completions since the sample 30 s ago
    assert m.error_rate == pytest.approx(known["failed_runs"] / (3 + known["failed_runs"]), abs=1e-4)
    assert m.avg_execution_seconds == pytest.approx(2.0)
    assert (m.execution_seconds.p50, m.execution_seconds.p95, m.execution_seconds.p99) == pytest.approx((2.0, 2.9, 2.98))
    assert m.execution_seconds_count == 3 and m.execution_seconds_sum == pytest.approx(6.0)
    assert m.start_latency_seconds.p50 == pytest.approx(0.5)
    assert 10 <= m.oldest_pending_age_seconds < 15
    assert m.total_jobs == known["enqueued"] == m.jobs_total["enqueued"]
    assert m.jobs_total == {"enqueued": 11, "done": 3, "failed": 3, "dead": 1}
    assert (m.dead_letter_count, m.reclaimed_total, m.timeouts_total, m.stale_lease_rejections_total) == (1, 0, 1, 0)
    assert m.queues["mail"].queue_depth["pending"] == 1 and 10 <= m.queues["mail"].oldest_pending_age_seconds < 15
    assert m.queues["mail"].active_workers == 1 and m.queues["mail"].jobs_per_second == 0
    by_type = dict(((t, s), n) for t, s, n in conn.execute("SELECT type, status, count(*) FROM jobs GROUP BY 1, 2"))
    for job_type, values in m.types.items():
        for status in jobq.STATUSES:
            assert values[status] == by_type.get((job_type, status), 0)
    assert m.types["x"]["failed_runs_total"] == 2


def test_a_reclaim_by_the_stale_reaper_is_counted(conn, database_url, known):
    with psycopg.connect(database_url, autocommit=True) as lost:
        jobq.enqueue("noop", priority=10, conn=conn)
        claim(lost, 1, worker_id="gone:2:y")
        pid = lost.info.backend_pid
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
        pass
    conn.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE worker_id = 'gone:2:y'")
    assert reaper.reap_stale(conn, SETTINGS, LOCK_BASE).released == 1
    assert metrics.snapshot(stale_seconds=30, conn=conn).reclaimed_total == 1


def prometheus_samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_prometheus_text_parses_and_matches(conn, known, client):
    samples = prometheus_samples(client.get("/metrics/prometheus").get_data(as_text=True))
    truth = ground_truth_depth(conn)
    for status in jobq.STATUSES:
        per_queue = sum(v for (name, labels), v in samples.items()
                        if name == "taskqueue_queue_depth" and ("status", status) in labels)
        assert per_queue == truth.get(status, 0)
    assert samples[("taskqueue_queue_depth", (("queue", "mail"), ("status", "pending")))] == 1
    assert samples[("taskqueue_active_workers", ())] == 1
    assert samples[("taskqueue_running_jobs", ())] == 1
    for status, n in {"enqueued": 11, "done": 3, "failed": 3, "dead": 1}.items():
        assert samples[("taskqueue_jobs_total", (("status", status),))] == n
    assert samples[("taskqueue_execution_seconds", (("quantile", "0.5"),))] == pytest.approx(2.0)
    assert samples[("taskqueue_execution_seconds", (("quantile", "0.99"),))] == pytest.approx(2.98)
    assert samples[("taskqueue_execution_seconds_count", ())] == 3
    assert samples[("taskqueue_execution_seconds_sum", ())] == pytest.approx(6.0)
    assert samples[("taskqueue_dead_letter_count", ())] == 1
    assert samples[("taskqueue_timeouts_total", ())] == 1
    assert samples[("taskqueue_reclaimed_total", ())] == 0
    assert samples[("taskqueue_stale_lease_rejections_total", ())] == 0
    assert 10 <= samples[("taskqueue_oldest_pending_age_seconds", (("queue", ""),))] < 15


def test_totals_stay_monotonic_when_finished_rows_are_deleted(conn, known, client):
    before = metrics.snapshot(stale_seconds=30, conn=conn)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '2 days' WHERE completed_at IS NOT NULL")
    assert prune(conn, older_than=3600) == 4
    after = metrics.snapshot(stale_seconds=30, conn=conn)
    assert after.queue_depth["done"] == after.queue_depth["dead"] == 0  # gauges drop to zero, and say so
    assert after.jobs_total == before.jobs_total and after.total_jobs == before.total_jobs
    text = client.get("/metrics/prometheus").get_data(as_text=True)
    samples = prometheus_samples(text)
    assert samples[("taskqueue_queue_depth", (("queue", "default"), ("status", "done")))] == 0
    assert samples[("taskqueue_jobs_total", (("status", "done"),))] == 3


def test_a_replayed_dead_letter_no_longer_counts(conn, known):
    (row,) = jobq.list_dead(conn=conn).items
    jobq.replay(row.id, conn=conn)
    m = metrics.snapshot(stale_seconds=30, conn=conn)
    assert m.dead_letter_count == 0 and m.total_jobs == 12


# -- paused queues and cancelled jobs ---------------------------------------------------


@pytest.fixture
def paused_and_cancelled(conn):
    """held: paused, one job due for 60 s; mail: one job due for 5 s, one cancelled."""
    jobq.enqueue("noop", queue="held", conn=conn)
    jobq.enqueue("noop", queue="mail", conn=conn)
    conn.execute("UPDATE jobs SET run_at = now() - make_interval(secs => CASE queue WHEN 'held' THEN 60 ELSE 5 END)")
    jobq.cancel(jobq.enqueue("noop", queue="mail", conn=conn).id, conn=conn)
    queues.pause("held", conn=conn)
    queues.pause("empty", conn=conn)


@pytest.mark.control
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


@pytest.mark.control
def test_prometheus_has_a_paused_gauge_per_queue_and_the_cancelled_depth(client, paused_and_cancelled):
    text = client.get("/metrics/prometheus").get_data(as_text=True)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    paused = {s.labels["queue"]: s.value for s in families["taskqueue_queue_paused"].samples}
    assert paused == {"default": 0.0, "empty": 1.0, "held": 1.0, "mail": 0.0}
    depth = {(s.labels["queue"], s.labels["status"]): s.value for s in families["taskqueue_queue_depth"].samples}
    assert depth[("mail", "cancelled")] == 1.0 and depth[("held", "cancelled")] == 0.0
    assert {status for _, status in depth} == set(jobq.STATUSES)
