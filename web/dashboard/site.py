"""The dashboard put together: its blueprints' hooks and error pages, and
:func:`install`, which adds it to the app as ``JOBQ_DASHBOARD`` says."""

from __future__ import annotations

from flask import Flask, Response, redirect, url_for
from werkzeug.exceptions import HTTPException, NotFound

from jobq.errors import JobqError
from jobq.settings import Settings
from web.dashboard import common, format, security
from web.dashboard import audit, dead_letter, job, jobs, operation, overview, queues, schedules, workers  # noqa: F401  (routes)
from web.dashboard import workflows  # noqa: F401  (routes)
from web.dashboard.blueprints import actions, pages
from web.errors import STATUSES

UNAVAILABLE = "the database is unavailable; retry in a moment"

# Blueprints whose routes the bearer token does not guard (their own login does), and
# the endpoints outside them that need no token either.
BLUEPRINTS = frozenset({pages.name, actions.name})
OPEN_ENDPOINTS = frozenset({"dashboard_root"})

# Only this server's own files; no inline script; no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def install(app: Flask, settings: Settings) -> None:
    """Add the dashboard to ``app`` as ``settings.dashboard`` says."""
    if settings.dashboard == "off":
        app.add_url_rule("/", "dashboard_root", _no_dashboard)  # 404, with a token set too
        return
    format.install(app)
    app.add_url_rule("/", "dashboard_root", lambda: redirect(url_for("dashboard.overview")))
    app.register_blueprint(pages)
    if settings.dashboard == "full":
        app.register_blueprint(actions)


def _no_dashboard() -> Response:
    raise NotFound("the dashboard is off (JOBQ_DASHBOARD=off)")


@pages.post("/logout")
def logout() -> Response:
    return security.logout()


def _error_page(exc: Exception) -> tuple[str, int]:
    if isinstance(exc, HTTPException):
        status, message = exc.code or 500, exc.description or exc.name
    else:
        status = next((code for cls, code in STATUSES if isinstance(exc, cls)), 500)
        message = str(exc) if status < 500 else UNAVAILABLE if status == 503 else "internal error"
    return common.page("message.html", "Error", message=message, status=status, back=None), status


def _headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if response.mimetype == "text/html":
        response.headers.setdefault("Cache-Control", "no-store")
    return response


# Set up once, when the module is imported (a blueprint takes no new hook once registered).
for _blueprint in (pages, actions):
    _blueprint.before_request(security.guard)
    _blueprint.after_request(security.set_cookie_if_new)
    _blueprint.after_request(_headers)
    _blueprint.context_processor(common.context)
    _blueprint.register_error_handler(JobqError, _error_page)
    _blueprint.register_error_handler(HTTPException, _error_page)
