"""A validated job (:data:`jobq.spec.Row`) as the parameters of the insert statements of
:mod:`jobq.store.sql.enqueue`: one row's, or many rows' as parallel arrays (one array
per column, so that a batch is one statement whatever its size)."""

from __future__ import annotations

from typing import Any

from jobq.jobs.copy_rows import array_literal
from jobq.spec import DEFAULT_UNIQUE_WHILE, Row, key_scope


def row_params(row: Row) -> dict[str, Any]:
    """One validated row as the single-row inserts take it (JOB_INSERT, JOB_INSERT_UNKEYED, JOB_INSERT_DEBOUNCED)."""
    type_, queue, payload, priority, max_retries, run_at, key, tags, scope, concurrency_key = row
    return {
        "type": type_,
        "queue": queue,
        "payload": payload.json_text,
        "priority": priority,
        "max_retries": max_retries,
        "run_at": run_at,
        "idempotency_key": key,
        "tags": tags,
        "unique_while": key_scope(scope, key),
        "concurrency_key": concurrency_key,
    }


def array_params(rows: list[Row]) -> dict[str, list[Any]]:
    """Rows as the parallel arrays of the many-row inserts (JOB_INSERT_MANY, JOB_INSERT_RESERVED)."""
    types, queues, payloads, priorities, max_retries, run_ats, keys, tags, scopes, concurrency_keys = zip(*rows)
    return {
        "types": list(types),
        "queues": list(queues),
        "payloads": [payload.json_text for payload in payloads],
        "priorities": list(priorities),
        "max_retries": list(max_retries),
        "run_ats": list(run_ats),
        "idempotency_keys": list(keys),
        "tags": [None if job_tags is None else array_literal(job_tags) for job_tags in tags],
        "unique_whiles": [scope or DEFAULT_UNIQUE_WHILE for scope in scopes],
        "concurrency_keys": list(concurrency_keys),
    }
