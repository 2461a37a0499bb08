"""``/workflows`` and ``GET /jobs/{id}?wait=N``: in-process for the contract and the
refusals, a real Gunicorn for a wait that must hold no connection while it waits."""

from __future__ import annotations

import threading
import time

import pytest

import jobq
from support.api import assert_error
from support.web_server import WebServer

pytestmark = [pytest.mark.api, pytest.mark.db, pytest.mark.workflows]

ORDER = {
    "name": "order-17",
    "steps": [
        {"name": "fetch", "type": "noop", "payload": {"url": "u"}},
        {"name": "thumb-64", "type": "noop", "after": ["fetch"], "priority": 8},
        {"name": "thumb-256", "type": "noop", "after": ["fetch"]},
        {"name": "publish", "type": "noop", "after": ["thumb-64", "thumb-256"], "on_parent_failure": "run"},
    ],
}


def test_a_workflow_is_created_read_listed_cancelled_and_retried(client, conn):
    created = client.post("/workflows", json=ORDER)
    assert created.status_code == 201, created.json
    body = created.json
    assert set(body["jobs"]) == {"fetch", "thumb-64", "thumb-256", "publish"} and body["status"] == "running"
    statuses = {s["name"]: s["status"] for s in body["steps"]}
    assert statuses == {"fetch": "pending", "thumb-64": "waiting", "thumb-256": "waiting", "publish": "waiting"}
    assert {(e["parent"], e["child"]) for e in body["edges"]} == {
        ("fetch", "thumb-64"), ("fetch", "thumb-256"), ("thumb-64", "publish"), ("thumb-256", "publish")}
    assert jobq.get(body["jobs"]["thumb-64"], conn=conn).priority == 8

    assert client.get(f"/workflows/{body['id']}").json == body
    listed = client.get("/workflows?status=running").json
    assert [w["id"] for w in listed["workflows"]] == [body["id"]] and listed["next_before"] is None
    assert client.get("/workflows?status=done").json["workflows"] == []

    cancelled = client.post(f"/workflows/{body['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json["status"] == "cancelled"
    retried = client.post(f"/workflows/{body['id']}/retry").json
    assert all(retried["jobs"][n] != body["jobs"][n] for n in body["jobs"]) and retried["status"] == "running"
    assert [a for (a,) in conn.execute("SELECT action FROM jobq_audit ORDER BY id")] == [
        "cancel_workflow", "retry_workflow"]


def test_the_list_pages_by_keyset(client):
    ids = [client.post("/workflows", json={"steps": [{"type": "noop"}]}).json["id"] for _ in range(3)]
    first = client.get("/workflows?limit=2").json
    assert [w["id"] for w in first["workflows"]] == ids[:0:-1] and first["next_before"] == ids[1]
    rest = client.get(f"/workflows?limit=2&before={first['next_before']}").json
    assert [w["id"] for w in rest["workflows"]] == [ids[0]] and rest["next_before"] is None


def test_an_idempotent_submission_answers_200_with_the_first(client):
    first = client.post("/workflows", json={**ORDER, "idempotency_key": "k-17"})
    again = client.post("/workflows", json={**ORDER, "idempotency_key": "k-17"})
    assert (first.status_code, again.status_code) == (201, 200) and again.json["id"] == first.json["id"]


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([{"name": "a", "type": "noop", "after": ["b"]}, {"name": "b", "type": "noop", "after": ["a"]}],
         "steps[b].after"),
        ([{"name": "a", "type": "noop", "after": ["nope"]}], "steps[a].after"),
        ([{"name": "a", "type": "noop"}, {"name": "a", "type": "noop"}], "steps[a].name"),
        ([{"name": "a", "type": "noop", "colour": "red"}], "steps[a].colour"),
        ([{"name": "a", "type": "noop", "priority": 99}], "steps[a].priority"),
        ([{"name": f"s{i}", "type": "noop"} for i in range(10_001)], "steps"),
    ],
)
def test_a_bad_workflow_answers_422_naming_the_step(client, conn, steps, field):
    detail = assert_error(client.post("/workflows", json={"steps": steps}), 422)
    assert detail[0]["loc"] == ["body", field]
    assert conn.execute("SELECT count(*) FROM jobq_workflows").fetchone()[0] == 0


def test_refusals_of_the_envelope_and_unknown_ids(client):
    assert_error(client.post("/workflows", json={"steps": []}), 422)
    assert_error(client.post("/workflows", json={"steps": [{"payload": {}}]}), 422)
    assert_error(client.get("/workflows/999"), 404)
    assert_error(client.post("/workflows/999/cancel"), 404)
    assert_error(client.get("/workflows?status=sideways"), 400)
    assert_error(client.get("/jobs/1?wait=26"), 400)
    assert_error(client.get("/jobs/1?wait=soon"), 400)


def test_a_step_is_not_retried_alone(client, conn):
    run = client.post("/workflows", json={"steps": [{"type": "noop"}]}).json
    job_id = run["jobs"]["noop"]
    client.post(f"/jobs/{job_id}/cancel")
    detail = assert_error(client.post(f"/jobs/{job_id}/retry"), 409)
    assert f"/workflows/{run['id']}/retry" in detail


@pytest.fixture
def server(database_url, tmp_path, conn):
    web = WebServer(database_url, tmp_path, WEB_CONCURRENCY="1").start()
    yield web
    web.stop()


def test_get_with_wait_answers_when_the_job_ends_or_after_n_seconds(server, conn):
    job = jobq.enqueue("noop", run_at="2099-01-01T00:00:00Z", conn=conn)
    started = time.monotonic()
    timed_out = server.request("GET", f"/jobs/{job.id}?wait=1")
    assert timed_out.status == 200 and timed_out.json()["status"] == "pending"
    assert 1 <= time.monotonic() - started < 10

    answer: dict = {}

    def waiter() -> None:
        answer["reply"] = server.request("GET", f"/jobs/{job.id}?wait=20")
        answer["at"] = time.monotonic()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(1)  # the waiter has registered and waits
    assert server.request("GET", f"/jobs/{job.id}").status == 200  # served beside it
    cancelled_at = time.monotonic()
    jobq.cancel(job.id, conn=conn)
    thread.join(25)
    assert answer["reply"].json()["status"] == "cancelled"
    assert answer["at"] - cancelled_at < 4  # woken by the notification, not the 5 s recheck
