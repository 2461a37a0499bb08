"""What the API tests share besides their fixtures (``make_app`` and ``client``, in
conftest.py): counting stored jobs, and the error-shape check."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg


def job_rows(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]


def assert_error(response: Any, status: int) -> Any:
    """``response`` (a Flask test response or a :class:`support.web_server.Reply`) has ``status``
    and the JSON error shape; returns its detail."""
    code = response.status_code if hasattr(response, "status_code") else response.status
    data = response.data if hasattr(response, "data") else response.body
    assert code == status, (code, data[:500])
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(data)
    assert set(body) == {"detail"}
    detail = body["detail"]
    if status == 422:
        assert detail and all(set(issue) == {"loc", "msg", "type"} for issue in detail)
    else:
        assert isinstance(detail, str) and detail and "Traceback" not in detail
    return detail


def csrf_of(html: bytes) -> str:
    """The dashboard's CSRF token on a page (its forms' hidden field)."""
    found = re.search(rb'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1).decode()
