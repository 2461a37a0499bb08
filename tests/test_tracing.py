"""OpenTelemetry across the queue: a producer process enqueues under a span, a real
`jobq worker` (its provider configured at its start, before it forks: BatchSpanProcessor's
thread started again in each child) runs the job, and each process's SDK exporter
writes its spans to a file the test reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.daemon import TESTS_DIR
from support.db import scalar
from support.schedules import entry
from support.waiting import wait_for

pytestmark = [pytest.mark.otel]


# A supervisor whose tracer provider is configured at its start, before it forks its
# workers and its maintenance process (support/otel_boot/sitecustomize.py).
BOOT = os.pathsep.join([str(TESTS_DIR / "support" / "otel_boot"), str(TESTS_DIR)])


def spans(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def produce(url: str, path: Path, job_type: str, count: int, *prelude: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url, "JOBQ_TEST_SPANS": str(path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "support.traced", job_type, str(count)],
                          env=env, cwd=path.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.db
@pytest.mark.daemon
def test_a_trace_crosses_the_queue_into_each_attempt_of_a_real_worker(conn, daemon, database_url, tmp_path):
    path = tmp_path / "spans.jsonl"
    daemon(1, JOBQ_TEST_SPANS=str(path), PYTHONPATH=BOOT)
    produce(database_url, path, "flaky", 1)
    job_id, traceparent = conn.execute("SELECT id, traceparent FROM jobs").fetchone()
    wait_for(lambda: scalar(conn, "SELECT status FROM jobs WHERE id = %s", job_id) == "done", 30, "the flaky job done")
    wait_for(lambda: sum(s["name"] == "process default" for s in spans(path)) == 3, 30, "three consumer spans")
    recorded = spans(path)
    (producer,) = [s for s in recorded if s["kind"] == "PRODUCER"]
    (request,) = [s for s in recorded if s["name"] == "request"]
    assert producer["name"] == "send default" and producer["parent_id"] == request["span_id"]
    assert producer["attributes"]["messaging.system"] == "jobq"
    assert traceparent.rsplit("-", 1)[0] == f"00-{producer['trace_id']}-{producer['span_id']}"  # then its flags
    consumers = sorted((s for s in recorded if s["kind"] == "CONSUMER"), key=lambda s: s["attributes"]["jobq.job.attempt"])
    assert [s["attributes"]["jobq.job.attempt"] for s in consumers] == [0, 1, 2]
    for span in consumers:
        assert span["trace_id"] == producer["trace_id"] and span["parent_id"] == producer["span_id"]
        assert span["pid"] != producer["pid"]  # the forked worker's own exporter
        assert {k: span["attributes"][k] for k in (
            "messaging.system", "messaging.operation.type", "messaging.destination.name", "messaging.message.id"
        )} == {"messaging.system": "jobq", "messaging.operation.type": "process",
               "messaging.destination.name": "default", "messaging.message.id": str(job_id)}
    assert [(s["status"], s["events"]) for s in consumers] == [
        ("ERROR", ["exception"]), ("ERROR", ["exception"]), ("UNSET", [])]
    first = consumers[0]["span_id"]
    assert [s["links"] for s in consumers] == [[], [first], [first]]  # each retry to the first attempt
    errors = scalar(conn, "SELECT errors FROM jobs WHERE id = %s", job_id)
    assert [entry["span"].split("-")[2] for entry in errors] == [s["span_id"] for s in consumers[:2]]
    assert any(s["name"] == "jobq claim" and s["pid"] == consumers[0]["pid"] for s in recorded)
    assert any(s["name"] == "jobq outcomes" for s in recorded)


@pytest.mark.db
@pytest.mark.daemon
@pytest.mark.schedules
def test_a_schedules_firing_is_a_producer_span_whose_jobs_run_in_its_trace(conn, daemon, tmp_path):
    path = tmp_path / "spans.jsonl"
    daemon(1, JOBQ_HANDLERS="support.handlers,support.schedules", JOBQ_TEST_SPANS=str(path), PYTHONPATH=BOOT,
           JOBQ_TEST_SCHEDULES=entry("tick", "* * * * * *"))
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobs WHERE schedule = 'tick' AND status = 'done'"), 30,
             "a fired job done")
    job_id, traceparent = conn.execute(
        "SELECT id, traceparent FROM jobs WHERE schedule = 'tick' AND status = 'done' ORDER BY id LIMIT 1").fetchone()
    producer_id = traceparent.split("-")[2]
    wait_for(lambda: any(s["span_id"] == producer_id for s in spans(path))
             and any(s["attributes"].get("messaging.message.id") == str(job_id) for s in spans(path)), 30, "its spans")
    recorded = spans(path)
    (producer,) = [s for s in recorded if s["span_id"] == producer_id]
    (consumer,) = [s for s in recorded if s["attributes"].get("messaging.message.id") == str(job_id)]
    assert producer["kind"] == "PRODUCER" and producer["parent_id"] is None  # a trace of its own
    assert consumer["parent_id"] == producer_id and consumer["trace_id"] == producer["trace_id"]
    assert producer["pid"] != consumer["pid"]  # fired by the maintenance process, run by a worker


@pytest.mark.db
def test_a_bulk_enqueue_by_copy_records_the_producers_traceparent_on_every_job(conn, database_url, tmp_path):
    path = tmp_path / "spans.jsonl"
    produce(database_url, path, "noop", 150)  # past COPY_THRESHOLD: the COPY path
    (producer,) = [s for s in spans(path) if s["kind"] == "PRODUCER"]
    assert producer["attributes"]["messaging.batch.message_count"] == 150
    assert conn.execute("SELECT DISTINCT split_part(traceparent, '-', 3) FROM jobs").fetchall() == [
        (producer["span_id"],)]
    # The session's setting was given back: the pool's next insert records nothing.
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE traceparent IS NULL") == 0


@pytest.mark.db
def test_over_http_the_clients_traceparent_is_the_parent_of_each_requests_producer_span(conn, database_url, tmp_path):
    path = tmp_path / "spans.jsonl"
    env = {**os.environ, "DATABASE_URL": database_url, "JOBQ_TEST_SPANS": str(path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "support.traced", "http", "noop"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    recorded = spans(path)
    clients = {s["name"]: s for s in recorded if s["name"].startswith("client ")}
    producers = [s for s in recorded if s["kind"] == "PRODUCER"]
    assert sorted(s["parent_id"] for s in producers) == sorted(s["span_id"] for s in clients.values())
    by_parent = {s["parent_id"]: s for s in producers}
    single = by_parent[clients["client /jobs"]["span_id"]]  # the grouped insert: the request's own span
    batch = by_parent[clients["client /jobs/batch"]["span_id"]]
    recorded_spans = [row[0] for row in conn.execute("SELECT split_part(traceparent, '-', 3) FROM jobs ORDER BY id")]
    assert recorded_spans == [single["span_id"], batch["span_id"], batch["span_id"]]


@pytest.mark.db
def test_without_a_provider_nothing_is_recorded_and_without_the_package_nothing_is_imported(conn, database_url):
    script = (
        "import sys, importlib.abc\n"
        "class Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry': raise ModuleNotFoundError(name)\n"
        "if sys.argv[1] == 'absent': sys.meta_path.insert(0, Absent())\n"
        "import jobq\nfrom jobq.observe import tracing\n"
        "jobq.enqueue('noop'); jobq.enqueue_many([{'type': 'noop'}] * 150)\n"
        "print(tracing.AVAILABLE, 'opentelemetry' in sys.modules)\n"
    )
    seen = {}
    for case in ("absent", "installed"):
        done = subprocess.run([sys.executable, "-c", script, case], env={**os.environ, "DATABASE_URL": database_url},
                              cwd="/", capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen[case] = done.stdout.split()
    assert seen == {"absent": ["False", "False"], "installed": ["True", "True"]}
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE traceparent IS NOT NULL") == 0
    assert scalar(conn, "SELECT count(*) FROM jobs") == 302
