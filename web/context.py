"""What the routes of one app share: its settings and its database pool."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app

from jobq.settings import Settings
from web.pool import Database

EXTENSION = "jobq"


@dataclass(frozen=True)
class ApiContext:
    settings: Settings
    database: Database


def attach(app: Flask, settings: Settings) -> ApiContext:
    """Give ``app`` its context (no connection is opened here)."""
    context = ApiContext(settings, Database(settings.require_database_url()))
    app.extensions[EXTENSION] = context
    return context


def api() -> ApiContext:
    """The context of the app handling the current request."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
