"""jobq's connections read json and jsonb with orjson (jobq.store.jsonb), and the values
are the standard library's, including what orjson refuses."""

from __future__ import annotations

import json

import psycopg
import pytest

import jobq
from jobq.store import connections, jsonb

SAMPLES = [
    b"{}",
    b"[]",
    b"null",
    b'{"url": "https://example.com/a?b=1", "sizes": [64, 256, 1024], "ok": true, "ratio": 0.25}',
    '{"name": "Zoë ☃", "nested": {"deep": [1, [2, [3]]]}}'.encode(),
    b'{"big": 123456789012345678901234567890, "neg": -98765432109876543210}',
    b'{"tiny": 1e-320, "huge": 1e400}',
]


@pytest.mark.parametrize("text", SAMPLES)
def test_loads_gives_the_standard_librarys_values(text):
    for data in (text, memoryview(text), text.decode()):
        assert jsonb.loads(data) == json.loads(text)
        assert type(jsonb.loads(data)) is type(json.loads(text))


def test_an_integer_beyond_64_bits_in_a_payload_comes_back_whole_from_a_claim_and_a_get(database_url):
    payload = {"n": 2**70 + 1, "m": -(2**65), "f": 0.1}
    with connections.connect(database_url) as conn:
        job = jobq.enqueue("big", payload, conn=conn)
        assert jobq.get(job.id, conn=conn).payload == payload
        assert conn.execute("SELECT payload FROM jobs WHERE id = %s", (job.id,)).fetchone()[0] == payload


def test_a_connection_of_jobqs_own_reads_jsonb_with_orjson_and_anothers_is_left_as_it_was(database_url):
    with connections.connect(database_url) as ours, psycopg.connect(database_url) as theirs:
        assert ours.adapters.get_loader(ours.adapters.types["jsonb"].oid, psycopg.pq.Format.TEXT)(0, ours).loads is jsonb.loads
        loader = theirs.adapters.get_loader(theirs.adapters.types["jsonb"].oid, psycopg.pq.Format.TEXT)(0, theirs)
        assert loader.loads is not jsonb.loads
