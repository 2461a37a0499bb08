"""Hostile input over every route: never a 5xx, always the JSON error shape, nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.api import assert_error

pytestmark = [pytest.mark.api, pytest.mark.db]

JSON = "application/json"
HUGE = "9" * 5000  # more digits than Python will turn into an int


def body(text: str | bytes, content_type: str = JSON) -> dict[str, Any]:
    return {"data": text.encode() if isinstance(text, str) else text, "content_type": content_type}


def job(**fields: Any) -> dict[str, Any]:
    return {"json": {"type": "noop", **fields}}


BODIES: list[tuple[str, dict[str, Any]]] = [
    ("invalid JSON", body('{"type": "noop",')),
    ("empty body", body("")),
    ("wrong content type", body('{"type": "noop"}', "text/plain")),
    ("form instead of JSON", body("type=noop", "application/x-www-form-urlencoded")),
    ("no content type", {"data": b'{"type": "noop"}'}),
    ("NaN", body('{"type": "noop", "payload": {"x": NaN}}')),
    ("Infinity", body('{"type": "noop", "priority": Infinity}')),
    ("-Infinity", body('{"type": "noop", "payload": {"x": -Infinity}}')),
    ("1e999", body('{"type": "noop", "payload": {"x": 1e999}}')),
    ("deep nesting past the parser", body('{"type": "noop", "payload": ' + "[" * 5000 + "]" * 5000 + "}")),
    ("deep nesting past the payload limit", body('{"type": "noop", "payload": {"a": ' + "[" * 100 + "]" * 100 + "}}")),
    ("NUL in payload", body('{"type": "noop", "payload": {"x": "a\\u0000b"}}')),
    ("NUL in payload key", body('{"type": "noop", "payload": {"a\\u0000": 1}}')),
    ("NUL in type", body('{"type": "no\\u0000op"}')),
    ("NUL in queue", body('{"type": "noop", "queue": "\\u0000"}')),
    ("NUL in idempotency key", body('{"type": "noop", "idempotency_key": "k\\u0000"}')),
    ("lone surrogate in payload", body('{"type": "noop", "payload": {"x": "\\ud800"}}')),
    ("lone low surrogate in type", body('{"type": "\\udc00"}')),
    ("invalid UTF-8", body(b'{"type": "\xff\xfe"}')),
    ("huge integer priority", body('{"type": "noop", "priority": 100000000000000000000000000000}')),
    ("integer past the parser", body('{"type": "noop", "priority": ' + HUGE + "}")),
    ("huge negative max_retries", body('{"type": "noop", "max_retries": -99999999999999999999}')),
    ("JSON null", body("null")),
    ("JSON array", body("[]")),
    ("JSON string holding a job", body(json.dumps(json.dumps({"type": "noop"})))),
    ("payload is a string", job(payload="{}")),
    ("type too long", job(type="t" * 10_000)),
    ("run_at a number", job(run_at=1700000000)),
    ("run_at out of range", job(run_at="99999-01-01T00:00:00")),
    ("run_at before year 1 in UTC", job(run_at="0001-01-01T00:00:00+05:00")),
    ("Idempotency-Key too long", {**job(), "headers": {"Idempotency-Key": "k" * 300}}),
]

BATCH_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("jobs missing", {"json": {}}),
    ("jobs not a list", {"json": {"jobs": {"type": "noop"}}}),
    ("an item not an object", {"json": {"jobs": [{"type": "noop"}, 7]}}),
    ("an item with NUL", {"json": {"jobs": [{"type": "noop"}, {"type": "x\u0000"}]}}),
    ("1001 jobs", {"json": {"jobs": [{"type": "noop"}] * 1001}}),
    ("duplicate idempotency keys", {"json": {"jobs": [{"type": "a", "idempotency_key": "k"}] * 2}}),
    ("invalid JSON", body('{"jobs": [')),
    ("NaN", body('{"jobs": [{"type": "noop", "payload": {"x": NaN}}]}')),
]

PAUSE_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("invalid JSON", body('{"reason": ')),
    ("wrong content type", body('{"reason": "x"}', "text/plain")),
    ("form instead of JSON", body("reason=x", "application/x-www-form-urlencoded")),
    ("JSON null", body("null")),
    ("JSON array", body("[]")),
    ("JSON string holding a body", body(json.dumps(json.dumps({"reason": "x"})))),
    ("reason not a string", {"json": {"reason": 7}}),
    ("reason too long", {"json": {"reason": "r" * 10_000}}),
    ("NUL in reason", body('{"reason": "a\\u0000b"}')),
    ("lone surrogate in reason", body('{"reason": "\\ud800"}')),
    ("unknown field", {"json": {"reason": "x", "queue": "y"}}),
    ("NaN", body('{"reason": NaN}')),
]

BAD_QUEUE_NAMES = ["q" * 101, "a%00b", "%C3%A9" * 101]

BULK_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("invalid JSON", body('{"filter": {')),
    ("wrong content type", body('{"filter": {"status": "dead"}, "action": "retry"}', "text/plain")),
    ("no body", {}),
    ("JSON array", body("[]")),
    ("filter missing", {"json": {"action": "retry"}}),
    ("empty filter", {"json": {"filter": {}, "action": "delete"}}),
    ("unknown filter field", {"json": {"filter": {"stauts": "dead"}, "action": "delete"}}),
    ("filter not an object", {"json": {"filter": "status=dead", "action": "delete"}}),
    ("unknown action", {"json": {"filter": {"status": "dead"}, "action": "drop table"}}),
    ("bad status", {"json": {"filter": {"status": "DEAD"}, "action": "retry"}}),
    ("NUL in queue", body('{"filter": {"queue": "a\\u0000"}, "action": "cancel"}')),
    ("lone surrogate in error", body('{"filter": {"error": "\\ud800"}, "action": "cancel"}')),
    ("ids not a list", {"json": {"filter": {"ids": 5}, "action": "cancel"}}),
    ("an id past 64 bits", body('{"filter": {"ids": [' + HUGE + ']}, "action": "cancel"}')),
    ("1001 ids", {"json": {"filter": {"ids": list(range(1, 1002))}, "action": "cancel"}}),
    ("created_after a number", {"json": {"filter": {"created_after": 17}, "action": "cancel"}}),
    ("created_before out of range", {"json": {"filter": {"created_before": "99999-01-01"}, "action": "cancel"}}),
    ("tag too long", {"json": {"filter": {"tag": "t" * 101}, "action": "cancel"}}),
    ("priority without set_priority", {"json": {"filter": {"status": "dead"}, "action": "retry", "priority": 5}}),
    ("set_priority without priority", {"json": {"filter": {"status": "pending"}, "action": "set_priority"}}),
    ("priority 11", {"json": {"filter": {"status": "pending"}, "action": "set_priority", "priority": 11}}),
    ("dry_run a string", {"json": {"filter": {"status": "dead"}, "action": "retry", "dry_run": "false"}}),
]

BAD_GROUPS = ["x", "0123456789ABCDEF", "0123456789abcdef0", "%00", "..%2F..%2Fetc", "g" * 16]

BAD_IDS = ["0", "-1", str(2**63), str(2**64), HUGE, "abc", "1.5", "1e3", "%00", "%27%20OR%201=1", "0x10"]

BAD_PAGES = [
    "limit=-1", "limit=0", "limit=501", f"limit={2**64}", f"limit={HUGE}", "limit=abc", "limit=1.5", "limit=",
    "offset=-1", f"offset={2**63}", f"offset={HUGE}", "offset=x",
]

BAD_JOB_FILTERS = [
    "status=bogus", "status=%00", "status=PENDING", "type=%00", "queue=a%00b", "type=" + "t" * 300,
    "created_after=yesterday", "created_after=99999-01-01", "created_after=" + HUGE,
    "created_after=9999-12-31T23:59:59-05:00",
    "tag=" + "t" * 101, "tag=a%00", "ids=0", "ids=x", f"ids={2**63}", "ids=1&ids=-1", "created_before=soon",
    "created_before=0001-01-01T00:00:00+05:00", "error=%00", "error=" + "e" * 1001,
    "cursor=", "cursor=%00", "cursor=bogus", "cursor=" + "c" * 300, "cursor=W10", "cursor=WyJ4IiwxXQ",
    "before=0", "before=x", f"before={2**63}", "before=999999999", "before=1&offset=3", "before=1&cursor=WyJ4IiwxXQ",
]

BAD_SCHEDULE_NAMES = ["%00", "a%20b", "x" * 101, "%27%20OR%201=1", "nightly%2F..", "%C3%A9t%C3%A9", "unknown"]

CASES: list[tuple[str, str, dict[str, Any]]] = (
    [("POST", "/jobs", kwargs) for _, kwargs in BODIES]
    + [("POST", "/jobs/batch", kwargs) for _, kwargs in BATCH_BODIES]
    + [(method, f"/jobs/{bad}", {}) for bad in BAD_IDS for method in ("GET", "DELETE")]
    + [(method, f"/dead-letter/{bad}{suffix}", {}) for bad in BAD_IDS
       for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/replay"))]
    + [("POST", "/jobs/bulk", kwargs) for _, kwargs in BULK_BODIES]
    + [("POST", f"/jobs/{bad}/{action}", {}) for bad in BAD_IDS for action in ("retry", "run-now")]
    + [("GET", f"/operations/{bad}", {}) for bad in BAD_IDS]
    + [("POST", f"/dead-letter/groups/{bad}/{action}", {}) for bad in BAD_GROUPS for action in ("replay", "discard")]
    + [("GET", f"/audit?{query}", {}) for query in
       ("limit=0", "limit=501", f"limit={HUGE}", "before=0", "before=-3", f"before={2**63}", "before=x")]
    + [("GET", f"/jobs?{query}", {}) for query in BAD_PAGES + BAD_JOB_FILTERS]
    + [("GET", f"/dead-letter?{query}", {}) for query in BAD_PAGES + ["type=%00"]]
    + [("POST", "/queues/q/pause", kwargs) for _, kwargs in PAUSE_BODIES]
    + [("POST", f"/queues/{bad}/{action}", {}) for bad in BAD_QUEUE_NAMES for action in ("pause", "resume")]
    + [("GET", f"/dead-letter/groups?{query}", {}) for query in ("limit=0", "limit=1001", f"limit={HUGE}", "limit=x")]
    + [(method, "/queues", {}) for method in ("POST", "DELETE")]
    + [("GET", f"/queues/q/{action}", {}) for action in ("pause", "resume")]
    + [(method, path, {}) for path in ("/metrics", "/metrics/prometheus", "/health", "/ready", "/openapi.json", "/docs")
       for method in ("POST", "DELETE")]
    + [("GET", "/" + "x" * 10_000, {}), ("GET", "/jobs/1/../../etc/passwd", {}), ("TRACE", "/jobs", {})]
    + [(method, f"/schedules/{bad}{suffix}", {}) for bad in BAD_SCHEDULE_NAMES
       for method, suffix in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("POST", "/run"))]
    + [("POST", f"/schedules/nightly/pause?{query}", {}) for query in ("reason=%00", "reason=" + "r" * 501)]
    + [(method, "/schedules", {}) for method in ("POST", "DELETE")]
    + [("GET", f"/stats?{query}", {}) for query in
       ("window=1d", "window=", "window=%00", "window=" + "w" * 10_000, "queue=", "queue=a%00", "queue=" + "q" * 101)]
    + [(method, "/stats", {}) for method in ("POST", "DELETE")]
)
CASE_IDS = [f"{method} {path[:60]} {i}" for i, (method, path, _) in enumerate(CASES)]


@pytest.fixture
def ledger_counts(conn):
    def read() -> tuple[int, int, int, int, int]:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM dead_letter_jobs), "
            "(SELECT coalesce(sum(n), 0) FROM job_counters WHERE name = 'enqueued_total'), "
            "(SELECT count(*) FROM jobq_queues), (SELECT count(*) FROM jobq_operations)"
        ).fetchone()
        return tuple(row)

    return read


@pytest.mark.parametrize(("method", "path", "kwargs"), CASES, ids=CASE_IDS)
def test_hostile_input_gets_a_json_4xx_and_stores_nothing(client, ledger_counts, method, path, kwargs):
    before = ledger_counts()
    response = client.open(path, method=method, **kwargs)
    assert 400 <= response.status_code < 500, (response.status_code, response.data[:300])
    assert_error(response, response.status_code)
    assert ledger_counts() == before


def test_a_body_over_the_limit_is_refused_before_it_is_read(make_app, ledger_counts):
    client = make_app(max_body_bytes=4096).test_client()
    for path in ("/jobs", "/jobs/batch"):
        assert_error(client.post(path, data=b"{" + b" " * 10_000 + b"}", content_type=JSON), 413)
    assert ledger_counts() == (0, 0, 0, 0, 0)
