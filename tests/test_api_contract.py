"""The HTTP contract of issue 4 (the seed's routes and shapes), through Flask's test client."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.api import assert_error, job_rows
from support.claims import claim, complete, drain, settle
from support.rows import STATUSES
from jobq.daemon import presence

pytestmark = [pytest.mark.api, pytest.mark.db]

SEED_FIELDS = {
    "id", "type", "payload", "status", "priority", "attempt", "max_retries", "run_at", "claimed_at",
    "heartbeat_at", "completed_at", "result", "error", "worker_id", "created_at",
}
JOB_FIELDS = SEED_FIELDS | {
    "queue", "started_at", "errors", "idempotency_key", "tags", "progress", "cancelled_by", "retried_as",
    "schedule", "scheduled_for", "snoozes", "unique_while", "workflow_id", "parent_results", "parent_failures",
    "handler_finished_at", "concurrency_key",
}
SEED_METRICS = {
    "queue_depth", "active_workers", "jobs_per_second", "error_rate", "avg_execution_seconds", "total_jobs",
    "dead_letter_count",
}


def test_post_jobs_answers_201_with_the_job_and_its_defaults(client):
    response = client.post("/jobs", json={"type": "noop"})
    assert response.status_code == 201
    job = response.get_json()
    assert set(job) == JOB_FIELDS
    fields = ("type", "status", "priority", "attempt", "max_retries")
    assert tuple(job[name] for name in fields) == ("noop", "pending", 5, 0, 3)
    assert (job["payload"], job["queue"], job["errors"], job["result"]) == ({}, "default", [], None)
    assert job["created_at"].endswith("+00:00") and job["run_at"] == job["created_at"]
    assert client.get(f"/jobs/{job['id']}").get_json() == job


def test_post_jobs_stores_every_field_and_reads_a_time_without_offset_as_utc(client):
    body = {"type": "echo", "payload": {"msg": "hello", "n": [1, {"x": None}]}, "priority": 9,
            "max_retries": 10, "run_at": "2031-05-04T03:02:01", "queue": "mail"}
    job = client.post("/jobs", json=body).get_json()
    assert {k: job[k] for k in ("type", "payload", "priority", "max_retries", "queue")} == {
        k: v for k, v in body.items() if k != "run_at"
    }
    assert job["run_at"] == "2031-05-04T03:02:01+00:00"
    far = client.post("/jobs", json={"type": "noop", "run_at": "2031-05-04T03:02:01+20:47"}).get_json()
    assert far["run_at"] == "2031-05-03T06:15:01+00:00"  # any ISO-8601 offset, kept in UTC


def test_unknown_top_level_fields_are_ignored_as_the_seed_did(client, conn):
    response = client.post("/jobs", json={"type": "noop", "labels": ["a"], "timeout": 3})
    assert response.status_code == 201 and "labels" not in response.get_json()
    assert job_rows(conn) == 1


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body", "type"]),
        ({"type": ""}, ["body", "type"]),
        ({"type": 7}, ["body", "type"]),
        ({"type": "x" * 201}, ["body", "type"]),
        ({"type": "noop", "priority": "7"}, ["body", "priority"]),
        ({"type": "noop", "priority": 7.5}, ["body", "priority"]),
        ({"type": "noop", "priority": True}, ["body", "priority"]),
        ({"type": "noop", "priority": 0}, ["body", "priority"]),
        ({"type": "noop", "priority": 11}, ["body", "priority"]),
        ({"type": "noop", "max_retries": -1}, ["body", "max_retries"]),
        ({"type": "noop", "max_retries": 11}, ["body", "max_retries"]),
        ({"type": "noop", "payload": [1]}, ["body", "payload"]),
        ({"type": "noop", "run_at": "tomorrow"}, ["body", "run_at"]),
        ({"type": "noop", "queue": ""}, ["body", "queue"]),
    ],
)
def test_an_invalid_job_answers_422_naming_the_field_and_stores_nothing(client, conn, body, loc):
    detail = assert_error(client.post("/jobs", json=body), 422)
    assert detail[0]["loc"] == loc
    assert job_rows(conn) == 0


def test_an_idempotency_key_returns_the_existing_job_with_200(client, conn):
    first = client.post("/jobs", json={"type": "noop"}, headers={"Idempotency-Key": "order-17"})
    again = client.post("/jobs", json={"type": "noop", "priority": 9}, headers={"Idempotency-Key": "order-17"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == first.get_json()
    assert first.get_json()["idempotency_key"] == "order-17"
    assert job_rows(conn) == 1


def test_an_idempotency_key_header_that_contradicts_the_body_is_refused(client, conn):
    response = client.post("/jobs", json={"type": "noop", "idempotency_key": "a"}, headers={"Idempotency-Key": "b"})
    assert "Idempotency-Key" in assert_error(response, 400)
    assert_error(client.post("/jobs", json={"type": "noop"}, headers={"Idempotency-Key": "k" * 256}), 422)
    assert job_rows(conn) == 0


def test_batch_answers_201_with_the_jobs_in_order(client, conn):
    bodies = [{"type": "noop", "payload": {"i": i}, "priority": 1 + i % 10} for i in range(25)]
    response = client.post("/jobs/batch", json={"jobs": bodies})
    assert response.status_code == 201
    jobs = response.get_json()["jobs"]
    assert [job["payload"]["i"] for job in jobs] == list(range(25))
    assert all(set(job) == JOB_FIELDS and job["status"] == "pending" for job in jobs)
    assert job_rows(conn) == 25


def test_batch_is_all_or_nothing_and_names_the_index_and_field_of_each_bad_item(client, conn):
    bodies = [{"type": "noop"}] * 5
    bodies[1] = {"type": "noop", "priority": 99}
    bodies[3] = {"payload": {}}
    detail = assert_error(client.post("/jobs/batch", json={"jobs": bodies}), 422)
    assert [issue["loc"] for issue in detail] == [["body", "jobs", 1, "priority"], ["body", "jobs", 3, "type"]]
    assert job_rows(conn) == 0


def test_batch_refuses_more_than_1000_jobs(client, conn):
    detail = assert_error(client.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 1001}), 422)
    assert detail[0]["loc"] == ["body", "jobs"]
    assert job_rows(conn) == 0


def test_get_of_an_absent_or_impossible_id_is_a_json_404_or_400(client):
    assert_error(client.get("/jobs/999999999"), 404)
    assert_error(client.get("/jobs/abc"), 404)
    assert_error(client.get("/jobs/-1"), 404)
    assert "job_id" in assert_error(client.get(f"/jobs/{2**64}"), 400)
    assert "job_id" in assert_error(client.get("/jobs/0"), 400)


def test_list_answers_a_page_newest_first(client):
    ids = [client.post("/jobs", json={"type": "noop"}).get_json()["id"] for _ in range(7)]
    page = client.get("/jobs?limit=3&offset=2").get_json()
    # The seed's keys, and the cursor of the next page (issue 15: clients that read the
    # seed's keys are unaffected).
    assert set(page) == {"items", "total", "limit", "offset", "next_cursor"}
    assert (page["total"], page["limit"], page["offset"]) == (7, 3, 2)
    assert [job["id"] for job in page["items"]] == sorted(ids, reverse=True)[2:5]
    default = client.get("/jobs").get_json()
    assert (default["limit"], default["offset"], len(default["items"])) == (50, 0, 7)


def test_list_filters_by_status_type_queue_and_created_after(client, conn):
    client.post("/jobs/batch", json={"jobs": [{"type": "a"}, {"type": "b", "queue": "q"}, {"type": "b"}]})
    (claimed,) = claim(conn, limit=1)
    complete(conn, [claimed])
    assert client.get("/jobs?status=done").get_json()["total"] == 1
    assert client.get("/jobs?type=b").get_json()["total"] == 2
    assert client.get("/jobs?type=b&queue=q").get_json()["total"] == 1
    newest = client.get("/jobs?limit=1").get_json()["items"][0]
    assert client.get("/jobs", query_string={"created_after": newest["created_at"]}).get_json()["total"] == 0
    past = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    assert client.get("/jobs", query_string={"created_after": past}).get_json()["total"] == 3
    assert client.get("/jobs", query_string={"created_after": "2000-01-01T00:00:00+20:00"}).get_json()["total"] == 3
    for status in STATUSES:
        assert client.get(f"/jobs?status={status}").status_code == 200


@pytest.mark.parametrize(
    ("query", "name"),
    [("status=bogus", "status"), ("limit=0", "limit"), ("limit=501", "limit"), ("limit=x", "limit"),
     ("offset=-1", "offset"), (f"offset={2**63}", "offset"), ("created_after=never", "created_after"),
     ("type=%00", "type")],
)
def test_a_bad_list_parameter_answers_400_naming_it(client, query, name):
    assert assert_error(client.get(f"/jobs?{query}"), 400).startswith(name)


def test_delete_cancels_a_pending_job_and_it_is_gone(client):
    job = client.post("/jobs", json={"type": "noop"}).get_json()
    response = client.delete(f"/jobs/{job['id']}")
    assert response.status_code == 204 and response.data == b""
    assert_error(client.get(f"/jobs/{job['id']}"), 404)
    assert_error(client.delete(f"/jobs/{job['id']}"), 404)


@pytest.mark.parametrize("status", ["claimed", "running", "done", "dead"])
def test_delete_of_a_job_past_pending_answers_409(client, conn, status):
    job = client.post("/jobs", json={"type": "noop", "max_retries": 0}).get_json()
    (claimed,) = claim(conn)
    settle(conn, claimed, status)
    assert status in assert_error(client.delete(f"/jobs/{job['id']}"), 409)
    assert client.get(f"/jobs/{job['id']}").get_json()["status"] == status


def test_dead_letter_rows_can_be_listed_read_replayed_once_and_discarded(client, conn):
    client.post("/jobs", json={"type": "always_fail", "payload": {"k": 1}, "max_retries": 0})
    drain(conn)
    page = client.get("/dead-letter?type=always_fail").get_json()
    assert (page["total"], page["limit"], page["offset"]) == (1, 50, 0)
    row = page["items"][0]
    assert {"id", "original_id", "type", "queue", "payload", "priority", "error", "attempts", "errors",
            "worker_id", "died_at", "replayed_at", "replayed_as"} <= set(row)
    assert client.get(f"/dead-letter/{row['id']}").get_json() == row
    replayed = client.post(f"/dead-letter/{row['id']}/replay")
    assert replayed.status_code == 201
    assert (replayed.get_json()["status"], replayed.get_json()["payload"]) == ("pending", {"k": 1})
    assert_error(client.post(f"/dead-letter/{row['id']}/replay"), 409)
    assert client.get(f"/dead-letter/{row['id']}").get_json()["replayed_as"] == replayed.get_json()["id"]
    assert client.delete(f"/dead-letter/{row['id']}").status_code == 204
    assert_error(client.get(f"/dead-letter/{row['id']}"), 404)
    assert_error(client.post(f"/dead-letter/{row['id']}/replay"), 404)


def test_metrics_answers_the_seed_fields_with_every_status(client, conn):
    metrics = client.get("/metrics").get_json()
    assert SEED_METRICS <= set(metrics)
    assert metrics["queue_depth"] == dict.fromkeys(STATUSES, 0)
    assert (metrics["active_workers"], metrics["total_jobs"], metrics["dead_letter_count"]) == (0, 0, 0)
    assert (metrics["jobs_per_second"], metrics["error_rate"], metrics["avg_execution_seconds"]) == (0.0, 0.0, None)

    client.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 3 + [{"type": "always_fail", "max_retries": 0}]})
    assert client.get("/metrics").get_json()["total_jobs"] == 4  # counted at enqueue
    drain(conn)
    presence.register(conn, "h:1:a", "h", 1, ["default"])
    metrics = client.get("/metrics").get_json()
    assert metrics["queue_depth"] == {**dict.fromkeys(STATUSES, 0), "done": 3, "dead": 1}
    assert (metrics["active_workers"], metrics["total_jobs"], metrics["dead_letter_count"]) == (1, 4, 1)
    assert isinstance(metrics["jobs_per_second"], float) and 0.0 <= metrics["error_rate"] <= 1.0
    assert metrics["avg_execution_seconds"] >= 0.0


def prometheus_samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value}, parsed by prometheus_client's own parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_prometheus_text_has_the_seed_metric_names(client, conn):
    client.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 2})
    response = client.get("/metrics/prometheus")
    assert response.status_code == 200 and response.content_type.startswith("text/plain")
    samples = prometheus_samples(response.get_data(as_text=True))
    assert samples[("taskqueue_queue_depth", (("queue", "default"), ("status", "pending")))] == 2
    for status in STATUSES:
        assert (("taskqueue_queue_depth", (("queue", "default"), ("status", status)))) in samples
    assert samples[("taskqueue_active_workers", ())] == 0
    assert samples[("taskqueue_jobs_total", (("status", "enqueued"),))] == 2


def test_health_does_not_touch_the_database_and_ready_does(make_app):
    app = make_app(database_url="postgresql://nobody@127.0.0.1:1/nothing")
    client = app.test_client()
    assert client.get("/health").get_json() == {"status": "ok"}
    response = client.get("/ready")
    assert_error(response, 503)
    assert response.headers["Retry-After"].isdigit()


def test_ready_answers_200_when_the_database_answers(client):
    assert client.get("/ready").get_json() == {"status": "ok"}


def test_admission_control_answers_429_with_retry_after_and_stores_nothing(make_app, conn):
    client = make_app(max_pending=2).test_client()
    client.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 3})
    for response in (client.post("/jobs", json={"type": "noop"}),
                     client.post("/jobs/batch", json={"jobs": [{"type": "noop"}]})):
        assert_error(response, 429)
        assert int(response.headers["Retry-After"]) > 0
    assert job_rows(conn) == 3


def test_a_token_guards_every_route_but_health(make_app):
    client = make_app(api_token="s3cret-token").test_client()
    for path in ("/jobs", "/jobs/1", "/dead-letter", "/metrics", "/metrics/prometheus", "/ready",
                 "/openapi.json", "/docs", "/no-such-route"):
        response = client.get(path)
        assert_error(response, 401)
        assert response.headers["WWW-Authenticate"].lower().startswith("bearer")
    for header in ("Bearer wrong", "Basic s3cret-token", "s3cret-token", "Bearer"):
        assert_error(client.get("/jobs", headers={"Authorization": header}), 401)
    assert_error(client.post("/jobs", json={"type": "noop"}), 401)
    assert client.get("/health").status_code == 200
    ok = {"Authorization": "Bearer s3cret-token"}
    assert client.get("/jobs", headers=ok).status_code == 200
    assert client.post("/jobs", json={"type": "noop"}, headers=ok).status_code == 201


def test_request_errors_are_json(client, make_app):
    assert_error(client.get("/no-such-route"), 404)
    response = client.put("/jobs")
    assert_error(response, 405)
    assert "POST" in response.headers["Allow"]
    assert_error(client.post("/jobs", data="type=noop"), 415)
    assert "JSON" in assert_error(client.post("/jobs", data="{", content_type="application/json"), 400)
    small = make_app(max_body_bytes=1024).test_client()
    assert "1024" in assert_error(small.post("/jobs", json={"type": "noop", "payload": {"x": "y" * 2000}}), 413)


def test_an_unexpected_failure_is_a_json_500_and_its_message_is_not_logged(make_app, caplog):
    app = make_app()
    secret = "".join(["card-", "4111"])  # not in any source line the stack shows

    @app.get("/boom")
    def boom():
        raise RuntimeError(secret)

    assert assert_error(app.test_client().get("/boom"), 500) == "internal server error"
    assert "api.unhandled error=RuntimeError path=/boom" in caplog.text and "in boom" in caplog.text
    assert secret not in caplog.text


def test_sql_looking_strings_and_big_numbers_are_stored_verbatim(client):
    text = "'); DROP TABLE jobs; --"
    body = {"type": text, "queue": text, "payload": {"q": text, "big": 123456789012345678901234567890, "f": -1.5e-7}}
    job = client.post("/jobs", json=body).get_json()
    stored = client.get(f"/jobs/{job['id']}").get_json()
    assert (stored["type"], stored["queue"], stored["payload"]) == (text, text, body["payload"])
    assert client.get("/jobs", query_string={"type": text}).get_json()["total"] == 1
