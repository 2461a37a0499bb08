"""Flow control through the Flask app: PATCH /queues/{name}, GET /limits, PUT and DELETE
/limits/{pattern} (URL-encoded), concurrency_key on POST /jobs and /jobs/batch, and bad
input answered as a JSON 4xx naming the field."""

from __future__ import annotations

import pytest

import jobq
from support.api import assert_error
from support.db import scalar

pytestmark = [pytest.mark.api, pytest.mark.db, pytest.mark.limits]


def test_patch_changes_only_the_fields_given_and_null_removes(client):
    answer = client.patch("/queues/mail", json={"concurrency": 5})
    assert answer.status_code == 200, answer.data
    assert answer.get_json() == {"queue": "mail", "concurrency": 5, "rate": None, "fair": False, "in_use": 0, "held": 0}
    assert client.patch("/queues/mail", json={"rate": "100/m"}).get_json()["concurrency"] == 5
    after = client.patch("/queues/mail", json={"concurrency": None}).get_json()
    assert (after["concurrency"], after["rate"]) == (None, "100/m")


def test_limits_are_put_listed_and_deleted_by_url_encoded_pattern(client, conn):
    put = client.put("/limits/tenant%3A%2A", json={"concurrency": 2})
    assert put.status_code == 200, put.data
    assert (put.get_json()["pattern"], put.get_json()["concurrency"]) == ("tenant:*", 2)
    assert put.get_json()["updated_at"] and put.get_json()["updated_by"] == "api:anonymous"
    client.patch("/queues/mail", json={"concurrency": 3})
    listed = client.get("/limits").get_json()
    assert [r["pattern"] for r in listed["rules"]] == ["tenant:*"]
    assert [q["queue"] for q in listed["queues"]] == ["mail"]
    assert client.delete("/limits/tenant%3A%2A").get_json() == {"pattern": "tenant:*", "cleared": True}
    assert client.delete("/limits/tenant%3A%2A").get_json() == {"pattern": "tenant:*", "cleared": False}
    actors = {a for (a,) in conn.execute("SELECT DISTINCT actor FROM jobq_audit WHERE action LIKE '%%limit%%'")}
    assert actors == {"api:anonymous"}


@pytest.mark.parametrize(
    "method, url, body, status, field",
    [
        ("patch", "/queues/mail", {"concurrency": 0}, 400, "concurrency"),
        ("patch", "/queues/mail", {"rate": "lots"}, 400, "rate"),
        ("patch", "/queues/mail", {"concurrency": "5"}, 422, "concurrency"),
        ("patch", "/queues/mail", {"burst": 5}, 422, "burst"),
        ("put", "/limits/a%2Ab", {"concurrency": 1}, 400, "pattern"),
        ("put", "/limits/tenant%3A%2A", {}, 400, "concurrency"),
        ("put", "/limits/tenant%3A%2A", {"rate": "1/d"}, 400, "rate"),
    ],
)
def test_bad_limits_answer_a_json_4xx_naming_the_field(client, method, url, body, status, field):
    detail = assert_error(getattr(client, method)(url, json=body), status)
    assert field in str(detail)


def test_a_limit_body_that_is_not_json_is_415(client):
    assert_error(client.patch("/queues/mail", data=b"concurrency=5", content_type="text/plain"), 415)


def test_post_jobs_and_batch_carry_a_concurrency_key(client, conn):
    one = client.post("/jobs", json={"type": "noop", "concurrency_key": "tenant:1"})
    assert one.status_code == 201 and one.get_json()["concurrency_key"] == "tenant:1"
    batch = client.post("/jobs/batch", json={"jobs": [{"type": "noop", "concurrency_key": "tenant:2"}, {"type": "noop"}]})
    assert [j["concurrency_key"] for j in batch.get_json()["jobs"]] == ["tenant:2", None]
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE concurrency_key LIKE 'tenant:%%'") == 2
    assert_error(client.post("/jobs", json={"type": "noop", "concurrency_key": ""}), 422)


def test_enqueue_many_fast_path_stores_concurrency_keys(conn):
    jobs = jobq.enqueue_many([{"type": "noop", "concurrency_key": f"k{i % 3}"} for i in range(150)], conn=conn)
    stored = dict(conn.execute("SELECT concurrency_key, count(*) FROM jobs GROUP BY 1").fetchall())
    assert stored == {"k0": 50, "k1": 50, "k2": 50}
    assert [j.concurrency_key for j in jobs[:3]] == ["k0", "k1", "k2"]


def test_prometheus_and_inspect_show_use_and_held_jobs_by_rule(client, conn, database_url):
    import json

    import psycopg

    from jobq.limits import claims as limited
    from jobq.settings import Settings
    from jobq.store import locks
    from support.cli import run_cli

    jobq.enqueue_many([{"type": "noop", "concurrency_key": "tenant:1"}] * 4, conn=conn)
    jobq.set_limit("tenant:*", concurrency=1, conn=conn)
    jobq.set_queue_limits("default", concurrency=3, conn=conn)
    lock_base = locks.key(Settings.from_env({}).advisory_namespace, 0)
    with psycopg.connect(database_url, autocommit=True) as holder:
        taken = limited.claim(holder, ["default"], worker_id="t", limit=10, lock_base=lock_base).result()
        assert len(taken) == 1
        text = client.get("/metrics/prometheus").get_data(as_text=True)
        assert 'taskqueue_limit_in_use{rule="key tenant:*"} 1.0' in text
        assert 'taskqueue_limit_held_jobs{rule="key tenant:*"} 3.0' in text
        assert 'taskqueue_limit_in_use{rule="queue default"} 1.0' in text
        inspected = run_cli("inspect", "--json", DATABASE_URL=database_url)
        assert inspected.returncode == 0, inspected.stderr
        snap = json.loads(inspected.stdout)
        assert [(r["pattern"], r["in_use"], r["held"]) for r in snap["limits"]] == [("tenant:*", 1, 3)]
        assert [(q["queue"], q["concurrency"], q["in_use"]) for q in snap["queue_limits"]] == [("default", 3, 1)]
        table = run_cli("inspect", DATABASE_URL=database_url, COLUMNS="200")
        assert "key tenant:*" in table.stdout and "queue default" in table.stdout


@pytest.mark.dashboard
def test_the_dashboard_shows_limits_slots_in_use_and_held_jobs(make_app, conn, database_url):
    import psycopg

    from jobq.limits import claims as limited
    from jobq.settings import Settings
    from jobq.store import locks

    jobq.enqueue_many([{"type": "noop", "queue": "mail", "concurrency_key": "tenant:7"}] * 3, conn=conn)
    jobq.set_limit("tenant:*", concurrency=1, rate="10/m", conn=conn)
    jobq.set_queue_limits("mail", concurrency=3, conn=conn)
    lock_base = locks.key(Settings.from_env({}).advisory_namespace, 0)
    client = make_app().test_client()
    with psycopg.connect(database_url, autocommit=True) as holder:
        assert len(limited.claim(holder, ["mail"], worker_id="t", limit=10, lock_base=lock_base).result()) == 1
        queues = client.get("/dashboard/queues").get_data(as_text=True)
        assert "1/3 running" in queues
        page = client.get("/dashboard/limits").get_data(as_text=True)
        row = page.split('data-limit="key tenant:*"')[1].split("</tr>")[0]
        cells = [c.split(">", 1)[1] for c in row.split("<td")[1:]]
        assert [c.split("<")[0] for c in cells[:5]] == ["1", "10/m", "1", "1", "2"]  # 2 held
