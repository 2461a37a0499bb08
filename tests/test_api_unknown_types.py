"""POST /jobs of a type no live worker has a handler for (workers announce their types):
accepted by default (the web may deploy before the workers), refused with 422 naming the
known types under JOBQ_UNKNOWN_TYPES=reject."""

from __future__ import annotations

import pytest

from jobq.daemon import presence

pytestmark = [pytest.mark.db, pytest.mark.api]


@pytest.fixture
def worker(conn):
    presence.register(conn, "host:9:abc", "host", 9, ["default"], handler_types=["echo", "noop"])
    yield
    presence.leave(conn, "host:9:abc")


def test_a_typod_type_is_accepted_by_default(client, worker):
    assert client.post("/jobs", json={"type": "ecoh"}).status_code == 201


def test_with_reject_a_typod_type_answers_422_naming_the_known_types(make_app, worker):
    client = make_app(unknown_types="reject").test_client()
    refused = client.post("/jobs", json={"type": "ecoh"})
    assert refused.status_code == 422
    assert refused.get_json() == {"detail": [{
        "loc": ["body", "type"], "msg": "no live worker has a handler for 'ecoh'; known types: echo, noop",
        "type": "unhandled_type"}]}
    assert client.post("/jobs", json={"type": "echo"}).status_code == 201


def test_with_reject_and_no_live_worker_nothing_is_refused(make_app):
    assert make_app(unknown_types="reject").test_client().post("/jobs", json={"type": "ecoh"}).status_code == 201
