"""``/schedules`` over HTTP: read, pause, resume, run now; errors as the rest of the API."""

from __future__ import annotations

import pytest

from support.api import assert_error
from jobq.schedules import stored
from jobq.daemon import presence
from jobq.schedules.declarations import _build
from jobq.settings import DEFAULT_STALE_THRESHOLD

pytestmark = [pytest.mark.api, pytest.mark.db, pytest.mark.schedules]


@pytest.fixture
def nightly(conn):
    conn.execute("TRUNCATE jobq_schedules, jobq_audit")
    declared = _build("nightly", "noop", cron="0 3 * * *", tz="Europe/Berlin", catch_up="latest", overlap="skip",
                      payload={"kind": "daily"}, queue="default", priority=7, max_retries=3)
    presence.register(conn, "w1", "host", 1, ["default"])
    presence.declare(conn, "w1", {"nightly": declared.definition_hash()})
    stored.declare(conn, "w1", {"nightly": declared}, stale_seconds=DEFAULT_STALE_THRESHOLD)
    return conn


def test_schedules_are_listed_and_shown_with_their_latest_jobs(client, nightly):
    listed = client.get("/schedules").get_json()["items"]
    assert [(s["name"], s["cron"], s["tz"], s["paused"], s["orphaned"], s["declared_by"]) for s in listed] == [
        ("nightly", "0 3 * * *", "Europe/Berlin", False, False, 1)
    ]
    created = client.post("/schedules/nightly/run")
    assert created.status_code == 201
    job = created.get_json()
    assert (job["schedule"], job["scheduled_for"], job["payload"], job["priority"]) == ("nightly", None, {"kind": "daily"}, 7)
    shown = client.get("/schedules/nightly").get_json()
    assert [j["id"] for j in shown["jobs"]] == [job["id"]]
    assert (shown["last_job_id"], shown["last_job_status"]) == (job["id"], "pending")
    assert client.get(f"/jobs/{job['id']}").get_json()["schedule"] == "nightly"


def test_pause_and_resume_are_audited_under_the_requests_actor(make_app, nightly):
    client = make_app(api_token="sekret").test_client()
    auth = {"Authorization": "Bearer sekret"}
    paused = client.post("/schedules/nightly/pause?reason=disk%20full", headers=auth).get_json()
    assert (paused["paused"], paused["reason"]) == (True, "disk full")
    assert paused["paused_by"].startswith("api:") and "sekret" not in paused["paused_by"]
    assert client.post("/schedules/nightly/resume", headers=auth).get_json()["paused"] is False
    actions = nightly.execute("SELECT actor, action FROM jobq_audit ORDER BY id").fetchall()
    assert [a for _, a in actions] == ["schedule.pause", "schedule.resume"]
    assert {actor for actor, _ in actions} == {paused["paused_by"]}
    assert_error(client.post("/schedules/nightly/pause"), 401)


@pytest.mark.parametrize("method, path", [("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("POST", "/run")])
def test_an_unknown_schedule_is_a_404_in_the_error_shape(client, nightly, method, path):
    response = client.open(f"/schedules/weekly{path}", method=method)
    assert_error(response, 404)
    assert response.get_json()["detail"] == "schedule 'weekly' not found"


def test_metrics_show_the_schedules_and_prometheus_their_last_run_age_and_pause(client, nightly):
    from datetime import timedelta

    from jobq.daemon.maintenance import firing
    from jobq.schedules.cron import Cron

    now = nightly.execute("SELECT now()").fetchone()[0]
    (last,), _ = Cron("0 3 * * *", "Europe/Berlin").due(now - timedelta(days=2), now, 1)
    nightly.execute("UPDATE jobq_schedules SET next_run_at = %s", (last,))
    assert firing.fire_due(nightly, stale_seconds=DEFAULT_STALE_THRESHOLD, catch_up_max=100).jobs == 1
    expected = (now - last).total_seconds()
    summary = client.get("/metrics").get_json()["schedules"]
    assert (summary["count"], summary["paused"], summary["orphaned"]) == (1, 0, 0)
    item = summary["items"]["nightly"]
    assert item["last_job_status"] == "pending" and expected <= item["last_run_age_seconds"] < expected + 60
    text = client.get("/metrics/prometheus").get_data(as_text=True)
    assert 'taskqueue_schedule_paused{schedule="nightly"} 0.0' in text
    age = next(line for line in text.splitlines() if line.startswith('taskqueue_schedule_last_run_age_seconds{schedule="nightly"}'))
    assert expected <= float(age.split()[-1]) < expected + 60
    client.post("/schedules/nightly/pause")
    assert 'taskqueue_schedule_paused{schedule="nightly"} 1.0' in client.get("/metrics/prometheus").get_data(as_text=True)
    assert client.get("/metrics").get_json()["schedules"]["paused"] == 1
