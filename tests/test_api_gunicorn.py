"""The API end to end: a real Gunicorn on a loopback port, real HTTP, the test database."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from support.api import assert_error, job_rows
from support.waiting import wait_for
from support.web_server import WebServer

pytestmark = [pytest.mark.api, pytest.mark.db]

TOKEN = "tok-7f3a-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """One Gunicorn for the module, with a token and a 64 KiB body limit."""
    web = WebServer(
        database_url, tmp_path_factory.mktemp("gunicorn"), JOBQ_API_TOKEN=TOKEN, JOBQ_MAX_BODY_BYTES=str(MAX_BODY)
    ).start()
    yield web
    web.stop()


def test_the_contract_end_to_end(server, conn):
    created = server.request("POST", "/jobs", {"type": "echo", "payload": {"msg": "hi"}, "priority": 8}, headers=AUTH)
    assert created.status == 201 and created.headers["Content-Type"] == "application/json"
    job = created.json()
    assert (job["type"], job["payload"], job["priority"], job["status"]) == ("echo", {"msg": "hi"}, 8, "pending")
    assert server.request("GET", f"/jobs/{job['id']}", headers=AUTH).json() == job

    batch = server.request("POST", "/jobs/batch", {"jobs": [{"type": "noop"}] * 3}, headers=AUTH)
    assert batch.status == 201 and len(batch.json()["jobs"]) == 3
    page = server.request("GET", "/jobs?type=noop&limit=2", headers=AUTH).json()
    assert (page["total"], page["limit"], page["offset"], len(page["items"])) == (3, 2, 0, 2)

    assert server.request("DELETE", f"/jobs/{job['id']}", headers=AUTH).status == 204
    assert_error(server.request("GET", f"/jobs/{job['id']}", headers=AUTH), 404)
    assert_error(server.request("POST", "/jobs", {"type": "noop", "priority": 11}, headers=AUTH), 422)
    assert_error(server.request("GET", "/jobs?status=nope", headers=AUTH), 400)

    metrics = server.request("GET", "/metrics", headers=AUTH).json()
    assert (metrics["queue_depth"]["pending"], metrics["total_jobs"]) == (3, 4)
    text = server.request("GET", "/metrics/prometheus", headers=AUTH).body.decode()
    assert 'taskqueue_queue_depth{queue="default",status="pending"} 3.0' in text and "taskqueue_active_workers" in text
    assert server.request("GET", "/ready", headers=AUTH).json() == {"status": "ok"}
    assert job_rows(conn) == 3


def test_docs_are_served_from_the_package(server):
    document = server.request("GET", "/openapi.json", headers=AUTH).json()
    assert document["openapi"].startswith("3.") and "/jobs/batch" in document["paths"]
    page = server.request("GET", "/docs", headers=AUTH).body.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(asset.startswith("/docs/") for asset in assets)  # nothing from a CDN
    for asset in assets:
        reply = server.request("GET", asset, headers=AUTH)
        assert reply.status == 200 and len(reply.body) > 100


def test_every_route_but_health_needs_the_token(server, conn):
    assert server.request("GET", "/health").json() == {"status": "ok"}
    for method, path in (("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/metrics"), ("GET", "/docs"), ("GET", "/nope")):
        reply = server.request(method, path, {"type": "noop"} if method == "POST" else None)
        assert_error(reply, 401)
        assert reply.headers["WWW-Authenticate"].lower().startswith("bearer")
    assert_error(server.request("GET", "/jobs", headers={"Authorization": f"Bearer {TOKEN}x"}), 401)
    assert job_rows(conn) == 0


def test_access_log_has_no_query_strings_and_no_tokens(server):
    server.request("GET", "/jobs?type=confidential-filter", headers=AUTH)
    server.request("POST", "/jobs", {"type": "noop", "payload": {"card": "4111-payload-secret"}}, headers=AUTH)
    # Gunicorn writes a request's access line after its response is sent: the client can
    # read the log before the line is there.
    def logged() -> str | None:
        text = server.log()
        return text if '"GET /jobs HTTP/1.1" 200' in text and '"POST /jobs HTTP/1.1" 201' in text else None

    log = wait_for(logged, 10, "both requests' access lines")
    for secret in ("confidential-filter", TOKEN, "payload-secret"):
        assert secret not in log


def test_bodies_over_the_limit_answer_413_and_store_nothing(server, conn):
    big = {"type": "noop", "payload": {"blob": "x" * MAX_BODY}}
    assert str(MAX_BODY) in assert_error(server.request("POST", "/jobs", big, headers=AUTH), 413)
    chunks = [b'{"type": "noop", "payload": {"blob": "'] + [b"x" * 8192] * 10 + [b'"}}']
    chunked = server.request("POST", "/jobs", raw=chunks, headers={**AUTH, "Content-Type": "application/json"})
    assert_error(chunked, 413)
    just_under = {"type": "noop", "payload": {"blob": "x" * (MAX_BODY - 100)}}
    assert server.request("POST", "/jobs", just_under, headers=AUTH).status == 201
    assert job_rows(conn) == 1


def test_malformed_bodies_answer_json_errors_over_http(server, conn):
    json_headers = {**AUTH, "Content-Type": "application/json"}
    assert_error(server.request("POST", "/jobs", raw=b'{"type": "noop"', headers=json_headers), 400)
    assert_error(server.request("POST", "/jobs", raw=b"\xff\xfe{}", headers=json_headers), 400)
    text_headers = {**AUTH, "Content-Type": "text/plain"}
    assert_error(server.request("POST", "/jobs", raw=b'{"type": "noop"}', headers=text_headers), 415)
    assert_error(server.request("POST", "/jobs", raw=b"[" * 5000 + b"]" * 5000, headers=json_headers), 400)
    assert_error(server.request("PATCH", "/jobs/1", headers=AUTH), 405)
    assert job_rows(conn) == 0
