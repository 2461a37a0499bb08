import dataclasses
from datetime import datetime, timezone

import pytest

from jobq import queries
from jobq.errors import InvalidArgument
from jobq.job import DeadLetter, Job
from jobq.spec import JobSpec, parse_spec

pytestmark = pytest.mark.unit


def test_defaults():
    spec = parse_spec({"type": "noop"})
    assert (spec.payload, spec.priority, spec.max_retries, spec.queue, spec.run_at) == ({}, 5, 3, "default", None)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"type": ""}, "type"),
        ({"type": 7}, "type"),
        ({"type": "x" * 201}, "type"),
        ({"type": "a\x00b"}, "type"),
        ({"type": "noop", "priority": True}, "priority"),
        ({"type": "noop", "priority": "7"}, "priority"),
        ({"type": "noop", "priority": 7.5}, "priority"),
        ({"type": "noop", "priority": 0}, "priority"),
        ({"type": "noop", "priority": 11}, "priority"),
        ({"type": "noop", "max_retries": 11}, "max_retries"),
        ({"type": "noop", "max_retries": -1}, "max_retries"),
        ({"type": "noop", "payload": [1, 2]}, "payload"),
        ({"type": "noop", "payload": "{}"}, "payload"),
        ({"type": "noop", "payload": {"a": "\x00"}}, "payload"),
        ({"type": "noop", "payload": {"a": "\ud800"}}, "payload"),
        ({"type": "noop", "payload": {"a": float("nan")}}, "payload"),
        ({"type": "noop", "payload": {"a": float("inf")}}, "payload"),
        ({"type": "noop", "payload": {"a": 10**5000}}, "payload"),
        ({"type": "noop", "run_at": 1700000000}, "run_at"),
        ({"type": "noop", "run_at": "tomorrow"}, "run_at"),
        ({"type": "noop", "queue": ""}, "queue"),
        ({"type": "noop", "idempotency_key": ""}, "idempotency_key"),
        ({"type": "noop", "colour": "red"}, "colour"),
    ],
)
def test_bad_values_name_their_field(values, field):
    with pytest.raises(InvalidArgument) as caught:
        parse_spec(values)
    assert caught.value.field == field


def test_deeply_nested_payload_is_refused():
    payload: dict = {}
    inner = payload
    for _ in range(100):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(InvalidArgument) as caught:
        parse_spec({"type": "noop", "payload": payload})
    assert "nested" in caught.value.message


def test_none_payload_means_empty_object():
    assert parse_spec({"type": "noop", "payload": None}).payload == {}


def test_run_at_with_any_offset_is_stored_in_utc():
    spec = parse_spec({"type": "noop", "run_at": "2030-01-02T03:04:05+20:47"})
    assert spec.run_at == datetime(2030, 1, 1, 6, 17, 5, tzinfo=timezone.utc) and spec.run_at.utcoffset().total_seconds() == 0
    with pytest.raises(InvalidArgument):
        parse_spec({"type": "noop", "run_at": "0001-01-01T00:00:00+05:00"})


def test_run_at_without_offset_means_utc():
    spec = parse_spec({"type": "noop", "run_at": "2030-01-02T03:04:05"})
    assert spec.run_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_payload_json_is_compact_and_keeps_unicode():
    assert JobSpec(type="t", payload={"a": "é", "b": [1]}).payload_json() == '{"a":"é","b":[1]}'


def test_job_getitem_reads_fields_like_a_dict():
    now = datetime.now(timezone.utc)
    job = Job(1, "noop", "default", {"x": 1}, "pending", 5, 0, 3, now, None, None, None, None, now, None, None, [], None)
    assert job["payload"] == {"x": 1} and job["id"] == 1
    with pytest.raises(KeyError):
        job["nope"]
    assert "lease" not in job.to_dict() and job.to_dict()["created_at"].endswith("+00:00")


def _names(columns: str) -> list[str]:
    return [name.strip() for name in columns.split(",")]


def test_sql_column_lists_match_the_row_types():
    assert _names(queries.JOB_COLUMNS) == [field.name for field in dataclasses.fields(Job)]
    assert _names(queries.DEAD_LETTER_COLUMNS) == [field.name for field in dataclasses.fields(DeadLetter)]


@pytest.mark.parametrize("text", ["\\u0000", "\\\\u0000", "a\\", "\\\\"])
def test_backslashes_that_only_look_like_nul_are_accepted(text):
    assert parse_spec({"type": "noop", "payload": {"a": text}}).payload == {"a": text}


@pytest.mark.parametrize("text", ["\x00", "a\\\x00", "\\\\\x00"])
def test_nul_after_any_backslashes_is_refused(text):
    with pytest.raises(InvalidArgument):
        parse_spec({"type": "noop", "payload": {"k": [text]}})


def test_payload_json_is_the_checked_text():
    spec = parse_spec({"type": "noop", "payload": {"b": 1, "a": [True, None]}})
    assert spec.payload_json() == '{"b":1,"a":[true,null]}'
