"""The dashboard's two blueprints, both under ``/dashboard``: ``pages`` (what it shows,
with its static files) and ``actions`` (what it does: every POST but the login), which is
registered only when ``JOBQ_DASHBOARD=full``. ``readonly`` thus has no action route at
all, not merely hidden buttons."""

from __future__ import annotations

from flask import Blueprint

PREFIX = "/dashboard"

pages = Blueprint(
    "dashboard", __name__, url_prefix=PREFIX, static_folder="static", static_url_path="/static",
)
actions = Blueprint("dashboard_actions", __name__, url_prefix=PREFIX)
