"""New jobs' rows in PostgreSQL's binary COPY format, built here in one pass.

:func:`jobq.jobs.submit` COPYs a large batch with
:data:`jobq.store.sql.enqueue.JOB_COPY` (or ``JOB_COPY_WITH_TAGS``). psycopg's ``write_row`` looks up and calls a dumper for every
value of every row (2.2 us a job of a 1,000-job batch, a third of the client's time);
here the parts that repeat across a batch, as most do (type and queue, priority,
max_retries and run_at, the payload of jobs that share one), are encoded once and
reused, and the stream is handed to ``Copy.write`` a few hundred rows at a time
(0.5 us a job).

The format (PostgreSQL's "COPY ... FORMAT BINARY"): a signature, then per row the
number of fields (int16) and each field as its length (int32; -1 for NULL) and its
value in the column type's binary form, then -1 (int16). The forms used: int8, int2
and int4 big-endian; text as its bytes in the connection's encoding; jsonb as a
version byte (1) and the JSON text; timestamptz as int64 microseconds since
2000-01-01 UTC; text[] as a one-dimensional array header and its elements.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

from jobq.spec import Row

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # no flags, no header extension
TRAILER = struct.pack(">h", -1)
NULL = struct.pack(">i", -1)
TEXT_OID = 25
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)

_ID = struct.Struct(">hiq")  # the field count, then the id: length 8, int8
_LENGTH = struct.Struct(">i")
_NUMBERS = struct.Struct(">ihii")  # priority (length 2, int2), max_retries (length 4, int4)
_TIMES = struct.Struct(">iqiq")  # run_at and created_at (length 8, int64 microseconds each)
_ARRAY_HEADER = struct.Struct(">iiiiii")  # byte length; 1 dimension, no NULLs, element type, size, lower bound 1


def job_rows(
    rows: Sequence[Row],
    ids: Sequence[int],
    now: datetime,
    *,
    tags: bool,
    keys: bool = False,
    encoding: str = "utf-8",
    chunk: int = 250,
) -> Iterator[bytes]:
    """The COPY stream of ``rows`` with their ``ids``, in pieces of ``chunk`` rows (so
    that the server can take in one while the next is made): columns (id, type, queue,
    payload, priority, max_retries, run_at, created_at) and, with ``tags``, tags, and with
    ``keys`` (needs ``tags``), concurrency_key; run_at
    None is ``now``, created_at is ``now``. Rows must have been validated (jobq.spec)."""
    fields = 8 + tags + keys
    heads: dict[tuple[str, str], bytes] = {}  # type and queue
    payloads: dict[str, bytes] = {}
    tails: dict[tuple[int, int, datetime | None], bytes] = {}  # priority to created_at
    created = _microseconds(now)
    parts = [SIGNATURE]
    append = parts.append
    for index, (job_id, (type_, queue, payload, priority, max_retries, run_at, _, job_tags, _, key)) in enumerate(
        zip(ids, rows, strict=True)
    ):
        if index and not index % chunk:
            yield b"".join(parts)
            parts.clear()
        head = heads.get((type_, queue))
        if head is None:
            head = heads[type_, queue] = _text(type_, encoding) + _text(queue, encoding)
        text = payload.json_text  # type: ignore[attr-defined]
        body = payloads.get(text)
        if body is None:
            data = text.encode(encoding)
            body = payloads[text] = _LENGTH.pack(len(data) + 1) + b"\x01" + data
        tail = tails.get((priority, max_retries, run_at))
        if tail is None:
            due = created if run_at is None else _microseconds(run_at)
            tail = tails[priority, max_retries, run_at] = _NUMBERS.pack(2, priority, 4, max_retries) + _TIMES.pack(8, due, 8, created)
        append(_ID.pack(fields, 8, job_id))
        append(head)
        append(body)
        append(tail)
        if tags:
            append(NULL if job_tags is None else _text_array(job_tags, encoding))
        if keys:
            append(NULL if key is None else _text(key, encoding))
    append(TRAILER)
    yield b"".join(parts)


def _microseconds(moment: datetime) -> int:
    delta = moment - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _text(value: str, encoding: str) -> bytes:
    data = value.encode(encoding)
    return _LENGTH.pack(len(data)) + data


def _text_array(values: list[str], encoding: str) -> bytes:
    elements = b"".join(_text(value, encoding) for value in values)
    return _ARRAY_HEADER.pack(20 + len(elements), 1, 0, TEXT_OID, len(values), 1) + elements


def array_literal(texts: list[str]) -> str:
    """``texts`` as a PostgreSQL array literal (``{"a","b\\"c"}``): every element quoted,
    its backslashes and double quotes escaped (the tags of an array INSERT's rows, one
    literal per job: jobq.jobs.submit)."""
    return "{" + ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in texts) + "}"
