"""``/queues`` and ``/dead-letter/groups`` through the Flask app: shapes, the optional
pause body, bad input, and the audit trail's actor."""

from __future__ import annotations

import pytest

import jobq
from support.api import assert_error
from support.claims import drain

pytestmark = [pytest.mark.api, pytest.mark.db, pytest.mark.control]

QUEUE_FIELDS = {"name", "paused", "paused_at", "paused_by", "reason", "depth", "workers", "oldest_pending_age_seconds"}


def test_get_queues_lists_every_queue_known_with_its_pause(client, conn):
    jobq.enqueue("noop", queue="mail", conn=conn)
    assert client.post("/queues/later/pause", json={"reason": "not yet"}).status_code == 200
    listed = client.get("/queues").get_json()
    assert list(listed) == ["queues"]
    later, mail = listed["queues"]
    assert set(mail) == set(later) == QUEUE_FIELDS
    assert (mail["name"], mail["paused"], mail["paused_at"], mail["depth"]["pending"]) == ("mail", False, None, 1)
    assert set(mail["depth"]) == set(jobq.STATUSES)
    assert (later["name"], later["paused"], later["reason"]) == ("later", True, "not yet")
    assert later["paused_at"] and later["paused_by"] == "api:anonymous"


def test_pause_takes_no_body_an_empty_one_or_a_reason(client):
    first = client.post("/queues/a/pause").get_json()
    assert first.pop("warning") == "no job, worker or schedule has ever named queue a: a typo?"
    assert first == {"queues": ["a"], "changed": ["a"], "unknown": ["a"]}
    assert client.post("/queues/b/pause", data=b"", content_type="application/json").status_code == 200
    assert client.post("/queues/c/pause", json={}).status_code == 200
    again = client.post("/queues/a/pause", json={"reason": "again"}).get_json()
    assert again == {"queues": ["a"], "changed": [], "unknown": []}  # named now: by its pause
    listed = {q["name"]: q for q in client.get("/queues").get_json()["queues"]}
    assert [listed[q]["paused"] for q in "abc"] == [True, True, True] and listed["a"]["reason"] is None


def test_resume_answers_what_changed(client):
    client.post("/queues/a/pause")
    assert client.post("/queues/a/resume").get_json() == {"queues": ["a"], "changed": ["a"], "unknown": []}
    assert client.post("/queues/a/resume").get_json() == {"queues": ["a"], "changed": [], "unknown": []}
    never = client.post("/queues/never/resume").get_json()
    assert never == {"queues": ["never"], "changed": [], "unknown": ["never"],
                     "warning": "no job, worker or schedule has ever named queue never: a typo?"}


def test_a_queue_name_with_a_slash_or_spaces_is_one_name(client):
    assert client.post("/queues/mail/high/pause").get_json()["changed"] == ["mail/high"]
    assert client.post("/queues/two%20words/pause").get_json()["changed"] == ["two words"]
    assert [q["name"] for q in client.get("/queues").get_json()["queues"]] == ["mail/high", "two words"]


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"data": b'{"reason": "x"}', "content_type": "text/plain"}, 415),
        ({"data": b'{"reason": ', "content_type": "application/json"}, 400),
        ({"json": {"reason": 7}}, 422),
        ({"json": {"reason": "r" * 1001}}, 422),
        ({"json": {"reason": "a\u0000b"}}, 422),
        ({"json": {"why": "x"}}, 422),
        ({"json": None, "data": b"null", "content_type": "application/json"}, 422),
        ({"json": ["reason"]}, 422),
        ({"data": b'"{}"', "content_type": "application/json"}, 422),
    ],
)
def test_a_bad_pause_body_is_refused_and_pauses_nothing(client, kwargs, status):
    kwargs = {k: v for k, v in kwargs.items() if not (k == "json" and v is None)}
    detail = assert_error(client.post("/queues/q/pause", **kwargs), status)
    if status == 422:
        assert detail[0]["loc"][0] == "body"
    assert client.get("/queues").get_json() == {"queues": []}


@pytest.mark.parametrize("bad", ["q" * 101, "a%00b", "%C3%A9" * 101])
def test_a_bad_queue_name_is_a_400_naming_it(client, bad):
    for action in ("pause", "resume"):
        detail = assert_error(client.post(f"/queues/{bad}/{action}"), 400)
        assert detail.startswith("name")
    assert client.get("/queues").get_json() == {"queues": []}


def test_pause_and_resume_are_audited_under_the_tokens_hmac(make_app, conn):
    client = make_app(api_token="s3cret").test_client()
    auth = {"Authorization": "Bearer s3cret"}
    assert_error(client.post("/queues/q/pause"), 401)
    client.post("/queues/q/pause", json={"reason": "incident"}, headers=auth)
    client.post("/queues/q/resume", headers=auth)
    rows = conn.execute(
        "SELECT actor, action, target FROM jobq_audit WHERE target->>'queue' = 'q' ORDER BY id DESC LIMIT 2"
    ).fetchall()
    assert [(action, target) for _, action, target in rows] == [
        ("resume", {"queue": "q"}), ("pause", {"queue": "q", "reason": "incident"}),
    ]
    assert {actor for actor, _, _ in rows} == {rows[0][0]} and rows[0][0].startswith("api:")
    assert "s3cret" not in rows[0][0]
    (queue,) = client.get("/queues", headers=auth).get_json()["queues"]
    assert (queue["name"], queue["paused"], queue["paused_by"]) == ("q", False, None)


def test_dead_letter_groups_route_is_not_taken_for_a_dead_letter_id(client, conn):
    jobq.enqueue("always_fail", max_retries=0, conn=conn)
    drain(conn)
    (group,) = client.get("/dead-letter/groups").get_json()["groups"]
    assert set(group) == {"id", "type", "signature", "count", "first_seen", "last_seen", "example_id"}
    assert (group["type"], group["count"]) == ("always_fail", 1)
    assert group["signature"] == "RuntimeError: always_fail: this job type fails on every attempt"
    assert client.get(f"/dead-letter/{group['example_id']}").get_json()["group_id"] == group["id"]
    assert client.get("/dead-letter/groups?limit=1").status_code == 200
    for bad in ("limit=0", "limit=1001", "limit=x"):
        assert assert_error(client.get(f"/dead-letter/groups?{bad}"), 400).startswith("limit")
