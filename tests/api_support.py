"""What the API tests share: apps over the test database, and the error-shape checks.

Its fixtures (``make_app``, ``client``) reach every test module as a plugin that
conftest.py names; the helpers are imported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from jobq.settings import Settings
from web.app import create_app
from web.context import api

AppFactory = Callable[..., Flask]


@pytest.fixture
def make_app(conn: psycopg.Connection, database_url: str) -> Iterator[AppFactory]:
    """Build apps over the (emptied) test database; settings from keyword arguments
    only, never from the environment. Their pools are closed after the test."""
    apps: list[Flask] = []

    def make(**settings: Any) -> Flask:
        app = create_app(Settings.from_env({}, **{"database_url": database_url, **settings}))
        apps.append(app)
        return app

    yield make
    for app in apps:
        with app.app_context():
            api().database.close()


@pytest.fixture
def client(make_app: AppFactory) -> FlaskClient:
    """A test client of an app with default settings (no token, no admission limit)."""
    return make_app().test_client()


def job_rows(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]


def assert_error(response: Any, status: int) -> Any:
    """``response`` (a Flask test response or a :class:`web_server.Reply`) has ``status``
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
