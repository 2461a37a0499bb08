"""Tags: up to 20 distinct strings of 1-100 characters on every way in (enqueue, each
path of enqueue_many, POST /jobs, /jobs/batch), stored as given, found by GET /jobs?tag=."""

from __future__ import annotations

import pytest

import jobq
from support.api import assert_error
from jobq.errors import InvalidArgument
from jobq.jobs.submit import submit_reserved
from jobq.spec import parse_specs

pytestmark = [pytest.mark.control, pytest.mark.db]

# Characters an array literal must quote or escape, and some it need not.
AWKWARD = ['a,b', '{braces}', 'quo"te', 'back\\slash', 'NULL', ' spaced ', 'ünï €', "x" * 100]


def stored(conn, job_id: int) -> list[str] | None:
    return conn.execute("SELECT tags FROM jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_every_insert_path_stores_the_tags_as_given(conn):
    one = jobq.enqueue("t", tags=AWKWARD, conn=conn)
    keyed = jobq.enqueue("t", tags=("k",), idempotency_key="key-1", conn=conn)
    few = jobq.enqueue_many([{"type": "t", "tags": AWKWARD}, {"type": "t"}, {"type": "t", "tags": []}], conn=conn)
    many = jobq.enqueue_many([{"type": "t", "tags": [f"n{i}", "bulk"]} for i in range(1001)], conn=conn)  # COPY
    reserved = submit_reserved(parse_specs([{"type": "t", "tags": AWKWARD}, {"type": "t"}]), conn=conn)
    again = submit_reserved(parse_specs([{"type": "t", "tags": ["z"]}]), [reserved[1].id + 1000], conn=conn)
    assert one.tags == AWKWARD and stored(conn, one.id) == AWKWARD
    assert stored(conn, keyed.id) == ["k"]
    assert [stored(conn, job.id) for job in few] == [AWKWARD, None, None] == [job.tags for job in few]
    assert stored(conn, many[1000].id) == ["n1000", "bulk"] and many[1000].tags == ["n1000", "bulk"]
    assert [stored(conn, job.id) for job in reserved] == [AWKWARD, None]
    assert stored(conn, again[0].id) == ["z"]
    assert jobq.list_jobs(tag="bulk", conn=conn).total == 1001
    assert jobq.list_jobs(tag='quo"te', conn=conn).total == 3


@pytest.mark.parametrize(
    ("tags", "field", "says"),
    [
        (["ok", ""], "tags[1]", "at least 1 character"),
        (["ok", "x" * 101], "tags[1]", "at most 100"),
        ([f"t{i}" for i in range(21)], "tags", "at most 20"),
        (["a", "b", "a"], "tags", "tags[2] repeats tags[0]"),
        (["a", "nul\x00"], "tags", "tags[1] contains a NUL"),
        (["a", 7], "tags[1]", "valid string"),
        ("urgent", "tags", "valid list"),
    ],
)
def test_bad_tags_are_refused_naming_the_item(conn, tags, field, says):
    with pytest.raises(InvalidArgument) as caught:
        jobq.enqueue("t", tags=tags, conn=conn)
    assert (caught.value.field, says in caught.value.message) == (field, True), caught.value
    with pytest.raises(InvalidArgument) as caught:
        jobq.enqueue_many([{"type": "t"}, {"type": "t", "tags": tags}], conn=conn)
    assert caught.value.field == f"jobs[1].{field}"


def test_the_api_takes_tags_and_answers_422_naming_a_bad_one(client, conn):
    created = client.post("/jobs", json={"type": "t", "tags": ["a", "b"]})
    assert created.status_code == 201 and created.get_json()["tags"] == ["a", "b"]
    batch = client.post("/jobs/batch", json={"jobs": [{"type": "t", "tags": ["b"]}, {"type": "t"}]})
    assert [job["tags"] for job in batch.get_json()["jobs"]] == [["b"], None]
    assert client.get("/jobs?tag=b").get_json()["total"] == 2
    detail = assert_error(client.post("/jobs", json={"type": "t", "tags": ["a", "b", "c", "x" * 101]}), 422)
    assert detail[0]["loc"] == ["body", "tags", 3]
    detail = assert_error(client.post("/jobs/batch", json={"jobs": [{"type": "t", "tags": [""]}]}), 422)
    assert detail[0]["loc"] == ["body", "jobs", 0, "tags", 0]
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 3
