import dataclasses
import json
from datetime import datetime, timedelta, timezone

import pytest

from jobq.store.sql.fragments import DEAD_LETTER_COLUMNS, JOB_COLUMNS
from jobq.errors import InvalidArgument
from jobq.job import DeadLetter, Job
from jobq.spec import JobSpec, parse_rows, parse_spec, parse_specs, storable_json

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
    assert _names(JOB_COLUMNS) == [field.name for field in dataclasses.fields(Job)]
    assert _names(DEAD_LETTER_COLUMNS) == [field.name for field in dataclasses.fields(DeadLetter)]


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


# parse_rows (enqueue_many's validation) checks plain jobs without a JobSpec each: it
# must accept exactly what parse_specs accepts, with the same values, and refuse the
# rest with the same error.
NOON = datetime(2030, 1, 2, 12, 0, tzinfo=timezone.utc)
GOOD = [
    {"type": "noop"},
    {"type": "noop", "payload": None},
    {"type": "noop", "payload": {}},
    {"type": "é" * 200, "queue": "q" * 100, "priority": 10, "max_retries": 0},
    {"type": "t", "payload": {"a": "é", "b": [1, 2.5, None, True], "c": {"d": "\\u0000"}}, "priority": 1},
    {"type": "t", "run_at": NOON},
    {"type": "t", "run_at": datetime(2030, 1, 2, 3, 4, 5)},  # no offset: UTC
    {"type": "t", "run_at": datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-20, minutes=-47)))},
    {"type": "t", "run_at": "2030-01-02T03:04:05+02:00"},  # not plain: JobSpec reads it
    {"type": "t", "run_at": None, "idempotency_key": "k" * 255, "unique_while": "active"},
    {"type": "t", "idempotency_key": "k2", "unique_while": None},
    {"type": "t", "unique_while": "pending"},  # refused later, by submit (the key may come from a header)
    {"type": "t", "tags": []},
    {"type": "t", "tags": None},
    {"type": "t", "tags": ["a", "b" * 100, "ünï €", 'quo"te']},
    {"type": "t", "tags": [f"t{i}" for i in range(20)]},
    {"type": "t", "tags": ("a", "b")},  # a tuple: not plain, JobSpec takes it
    JobSpec(type="already", priority=2),
]
BAD = [
    {}, {"type": ""}, {"type": 7}, {"type": "x" * 201}, {"type": "a\x00b"}, {"type": "\ud800"}, {"type": None},
    {"type": "t", "priority": True}, {"type": "t", "priority": "7"}, {"type": "t", "priority": 7.5},
    {"type": "t", "priority": 0}, {"type": "t", "priority": 11}, {"type": "t", "priority": None},
    {"type": "t", "max_retries": 11}, {"type": "t", "max_retries": -1}, {"type": "t", "max_retries": False},
    {"type": "t", "payload": [1, 2]}, {"type": "t", "payload": "{}"}, {"type": "t", "payload": 0},
    {"type": "t", "payload": {"a": "\x00"}}, {"type": "t", "payload": {"a": "\ud800"}},
    {"type": "t", "payload": {"a": float("nan")}}, {"type": "t", "payload": {"a": 10**5000}},
    {"type": "t", "payload": {1: "int key"}}, {"type": "t", "payload": {"a": object()}}, {"type": "t", "payload": {"a": b"x"}},
    {"type": "t", "run_at": 1700000000}, {"type": "t", "run_at": "tomorrow"},
    {"type": "t", "run_at": datetime(1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=5)))},
    {"type": "t", "queue": ""}, {"type": "t", "queue": "q" * 101}, {"type": "t", "queue": None},
    {"type": "t", "idempotency_key": ""}, {"type": "t", "idempotency_key": "k" * 256}, {"type": "t", "idempotency_key": 5},
    {"type": "t", "unique_while": "forever"}, {"type": "t", "unique_while": 1},
    {"type": "t", "tags": ["ok", ""]}, {"type": "t", "tags": ["x" * 101]}, {"type": "t", "tags": [f"t{i}" for i in range(21)]},
    {"type": "t", "tags": ["a", "b", "a"]}, {"type": "t", "tags": ["a", "nul\x00"]}, {"type": "t", "tags": ["a", 7]},
    {"type": "t", "tags": "urgent"}, {"type": "t", "colour": "red"}, {"type": "t", 3: "x"},
    "noop", None, 7, [("type", "t")],
]


def _rows(batch):
    return [(*row[:2], row[2].json_text, *row[3:]) for row in batch]


def test_parse_rows_reads_every_accepted_job_as_jobspec_does():
    rows = parse_rows(GOOD)
    assert _rows(rows) == _rows([spec.row() for spec in parse_specs(GOOD)])
    assert [row[5].utcoffset() for row in rows if row[5] is not None] == [timedelta(0)] * 4
    assert rows[4][2] == GOOD[4]["payload"] and rows[4][2] is not GOOD[4]["payload"]  # a copy, as JobSpec's


@pytest.mark.parametrize("bad", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_parse_rows_refuses_with_the_error_parse_specs_gives(bad):
    batch = [*GOOD, bad, {"type": ""}]
    with pytest.raises(InvalidArgument) as expected:
        parse_specs(batch)
    with pytest.raises(InvalidArgument) as caught:
        parse_rows(batch)
    assert (caught.value.field, caught.value.message) == (expected.value.field, expected.value.message)
    assert caught.value.field.startswith(f"jobs[{len(GOOD)}]")


def test_only_the_jobs_that_are_not_plain_go_through_a_jobspec(monkeypatch):
    validated = []
    real = JobSpec.model_validate
    monkeypatch.setattr(JobSpec, "model_validate", lambda values: validated.append(values) or real(values))
    plain = [{"type": "noop", "payload": {"i": i}, "tags": ["a"], "run_at": NOON} for i in range(1000)]
    assert len(parse_rows(plain)) == 1000 and validated == []
    parse_rows([*plain, {"type": "noop", "run_at": "2030-01-02T03:04:05Z"}])
    assert validated == [{"type": "noop", "run_at": "2030-01-02T03:04:05Z"}]


@pytest.mark.parametrize("payload", [{}, {"é": "ü\u2028\x1f\"\\", "n": None, "b": [True, False, 1.5, -0.0, 10**30], "d": {"x": [{}]}}])
def test_payload_json_is_what_the_json_module_writes(payload):
    # spec._encode calls json's C encoder directly: the same text as json.dumps.
    expected = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert parse_spec({"type": "t", "payload": payload}).payload_json() == expected
    assert parse_rows([{"type": "t", "payload": payload}])[0][2].json_text == expected


def test_a_payload_that_contains_itself_is_refused():
    payload: dict = {"a": 1}
    payload["me"] = payload
    with pytest.raises(InvalidArgument) as caught:
        parse_rows([{"type": "t"}, {"type": "t", "payload": payload}])
    assert caught.value.field == "jobs[1].payload" and "Circular" in caught.value.message
    assert parse_rows([{"type": "t", "payload": {"a": 1}}])[0][2].json_text == '{"a":1}'  # nothing left behind


@pytest.mark.parametrize("value", [None, {}, [], 0, "x", {"a": [1, None, "é"]}])
def test_storable_json_is_the_compact_json_of_the_value(value):
    """A handler's result as stored: None (most handlers' result, taken without an
    encoder) is JSON null like the rest."""
    assert storable_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
