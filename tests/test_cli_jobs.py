"""``jobq enqueue`` and ``jobq show``: one job from the command line, as the API and the
dashboard's job page give it; tables that do not wrap when piped; log lines never in a
command's output."""

from __future__ import annotations

import json

import pytest

import jobq
from jobq.daemon import presence
from support.claims import drain
from support.cli import run_cli

pytestmark = pytest.mark.db


def test_enqueue_prints_the_new_jobs_id_and_show_tells_its_story(conn, database_url):
    made = run_cli("enqueue", "echo", '{"hello": "world"}', "--queue", "mail", "--priority", "7", "--tag", "tour",
                   DATABASE_URL=database_url)
    assert made.returncode == 0, made.stderr
    line = made.stdout.strip()
    assert line.startswith("jobq: enqueued job ") and line.endswith("(echo on mail, due now)")
    job_id = int(line.split()[3])
    job = jobq.get(job_id, conn=conn)
    assert (job.payload, job.priority, job.tags, job.queue) == ({"hello": "world"}, 7, ["tour"], "mail")

    drain(conn, queues=["mail"])
    shown = run_cli("show", str(job_id), DATABASE_URL=database_url)
    assert shown.returncode == 0, shown.stderr
    for text in (f"job {job_id}: echo (done)", '{"hello": "world"}', "timeline (UTC)", "created", "claimed", "done"):
        assert text in shown.stdout
    as_json = json.loads(run_cli("show", str(job_id), "--json", DATABASE_URL=database_url).stdout)
    assert (as_json["id"], as_json["status"], as_json["result"]) == (job_id, "done", {"hello": "world"})


def test_a_scheduled_job_is_shown_as_due_in_the_future(conn, database_url):
    made = run_cli("enqueue", "noop", "--run-at", "2999-01-01T00:00:00", "--json", DATABASE_URL=database_url)
    job = json.loads(made.stdout)
    assert job["run_at"].startswith("2999-01-01T00:00:00")
    shown = run_cli("show", str(job["id"]), DATABASE_URL=database_url).stdout
    due = next(line for line in shown.splitlines() if " due " in f" {line} " and "run_at" in line)
    assert "in " in due and "was due" not in due


def test_enqueue_and_show_refuse_bad_input_in_one_line(database_url):
    not_json = run_cli("enqueue", "echo", "{nope", DATABASE_URL=database_url)
    assert not_json.returncode == 2 and "PAYLOAD_JSON" in not_json.stderr and "Traceback" not in not_json.stderr
    bad_priority = run_cli("enqueue", "echo", "--priority", "99", DATABASE_URL=database_url)
    assert bad_priority.returncode == 1 and bad_priority.stderr.startswith("jobq: priority:")
    missing = run_cli("show", "999999999", DATABASE_URL=database_url)
    assert (missing.returncode, missing.stderr.strip()) == (1, "jobq: job 999999999 not found")


def test_enqueue_of_a_type_no_live_worker_handles_warns_or_with_reject_refuses(conn, database_url):
    presence.register(conn, "host:9:abc", "host", 9, ["default"], handler_types=["echo", "noop"])
    warned = run_cli("enqueue", "ecoh", DATABASE_URL=database_url)
    assert warned.returncode == 0 and "no live worker has a handler for job type 'ecoh'" in warned.stderr
    refused = run_cli("enqueue", "ecoh", DATABASE_URL=database_url, JOBQ_UNKNOWN_TYPES="reject")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "jobq: type: no live worker has a handler for 'ecoh'; known types: echo, noop"
    presence.leave(conn, "host:9:abc")


def test_piped_tables_do_not_wrap(conn, database_url):
    long_queue = "q" + "x" * 90
    jobq.enqueue("noop", queue=long_queue, conn=conn)
    listed = run_cli("queues", "list", DATABASE_URL=database_url)  # no COLUMNS: piped
    row = next(line for line in listed.stdout.splitlines() if long_queue in line)
    assert len(row) > 100 and "pending" in listed.stdout
