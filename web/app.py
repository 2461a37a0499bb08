"""The application factory: ``gunicorn 'web.app:create_app()'``.

``create_app`` takes the process's validated configuration (:func:`jobq.settings.current`,
read once: under Gunicorn, ``deploy/gunicorn.conf.py`` has read it already), registers
one blueprint per resource and the error handlers, and opens no connection: each
process opens its own pool on its first request (after Gunicorn's fork).
"""

from __future__ import annotations

from flask_openapi3 import Info, OpenAPI

import jobq.settings
from jobq import __version__
from jobq.settings import Settings
from web import auth, context, dashboard, errors, jsonio
from web.audit import audit
from web.dead_letter import dead_letter
from web.docs import docs
from web.health import health
from web.job_actions import job_actions
from web.jobs import jobs
from web.limits import limits
from web.metrics import metrics
from web.operations import bulk, operations
from web.queues import queues
from web.schedules import schedules
from web.stats import stats
from web.workflows import workflow_actions, workflows
from web.blueprints import BEARER_SCHEME
from web.schemas import Error, ValidationFailure

OPEN_ENDPOINTS = frozenset({"health.liveness"})  # answered without a token


def create_app(settings: Settings | None = None) -> OpenAPI:
    """Build the jobq API for ``settings`` (default: :func:`jobq.settings.current`).

    Raises :class:`jobq.errors.ConfigError` naming a bad or missing variable
    (``DATABASE_URL`` is required).
    """
    settings = settings or jobq.settings.current()
    app = OpenAPI(
        __name__,
        info=Info(title="jobq", version=__version__, description="A background job queue on PostgreSQL."),
        security_schemes=BEARER_SCHEME,
        doc_ui=False,
        responses={500: Error},
        validation_error_callback=errors.validation_response,
        # Only tells flask-openapi3 which response to add to operations that lack it,
        # and every operation has a 500: errors.validation_response picks 400 or 422.
        validation_error_status=500,
        validation_error_model=ValidationFailure,
    )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    jsonio.install(app)
    context.attach(app, settings)
    if settings.api_token:
        # The dashboard's pages answer to its own login (a cookie), never to the bearer token.
        app.before_request(auth.bearer_guard(
            settings.api_token, OPEN_ENDPOINTS | dashboard.OPEN_ENDPOINTS, own_guard=dashboard.BLUEPRINTS
        ))
    for blueprint in (jobs, job_actions, bulk, operations, dead_letter, queues, limits, schedules, audit, metrics, stats, health,
                      workflows, workflow_actions):
        app.register_api(blueprint)
    app.register_blueprint(docs)
    dashboard.install(app, settings)
    errors.register(app)
    return app
