"""Every error the API answers, in one JSON shape, decided in this one module.

``{"detail": "<message>"}`` for every status but 422, whose ``detail`` is a list of
``{"loc": [...], "msg": ..., "type": ...}`` (the seed's FastAPI shape). jobq's own
errors map to statuses by class; werkzeug's HTTP errors keep their status and
headers (``Allow``, ``WWW-Authenticate``) with a JSON body; anything else is a 500
whose stack goes to the log (without its message, which may quote a payload), never
to the client.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from flask import Flask, Response, current_app, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from jobq.errors import Conflict, DatabaseUnavailable, InvalidArgument, JobqError, NotFound, Overloaded
from jobq.errors import OutcomeUnknown, UnhandledType
from web.schemas import LOCATIONS

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5  # what 429 and 503 ask a client to wait

# jobq's error classes, most specific first; anything else of jobq's is a 500.
STATUSES: tuple[tuple[type[JobqError], int], ...] = (
    (InvalidArgument, 400),
    (NotFound, 404),
    (Conflict, 409),
    (Overloaded, 429),
    (DatabaseUnavailable, 503),
)


def error_response(status: int, detail: Any, headers: dict[str, str] | None = None) -> Response:
    """The one error shape: ``{"detail": detail}`` with ``status``."""
    response = current_app.json.response({"detail": detail})
    response.status_code = status
    response.headers.update(headers or {})
    return response


def validation_response(exc: ValidationError) -> Response:
    """A request model refused the request: 422 naming each problem's location, or
    400 naming the first bad path or query parameter.

    flask-openapi3 calls this (``validation_error_callback``) with the error of the
    first model that failed; it is also the handler of any ValidationError raised.
    """
    where = LOCATIONS.get(exc.title, "body")
    issues = exc.errors(include_url=False, include_input=False, include_context=False)
    if where in ("path", "query"):
        first = issues[0]
        name = ".".join(str(part) for part in first["loc"]) or where
        return error_response(400, f"{name}: {first['msg']}")
    return error_response(
        422, [{"loc": [where, *issue["loc"]], "msg": issue["msg"], "type": issue["type"]} for issue in issues]
    )


def register(app: Flask) -> None:
    """Install the handlers on ``app``."""
    app.register_error_handler(ValidationError, validation_response)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(JobqError, _jobq_error)
    app.register_error_handler(Exception, _unexpected)


def _http_error(exc: HTTPException) -> Response:
    if exc.response is not None:  # already a response (flask-openapi3's validation errors)
        return exc.response
    if isinstance(exc, RequestEntityTooLarge):
        detail = f"request body larger than {current_app.config['MAX_CONTENT_LENGTH']} bytes"
    elif exc.description != type(exc).description:  # a message written for this case
        detail = exc.description
    else:
        detail = exc.name
    response = exc.get_response()
    response.set_data(current_app.json.dumps({"detail": detail}))
    response.mimetype = "application/json"
    return response


def _jobq_error(exc: JobqError) -> Response:
    if isinstance(exc, UnhandledType):  # JOBQ_UNKNOWN_TYPES=reject: 422 shaped as a body's validation failure
        return error_response(422, [{"loc": ["body", "type"], "msg": exc.message, "type": "unhandled_type"}])
    status = next((code for cls, code in STATUSES if isinstance(exc, cls)), 500)
    if status == 503:
        log.warning("api.database_unavailable reason=%s", exc)
        if isinstance(exc, OutcomeUnknown) and len(exc.ids) == 1:  # a POST /jobs whose insert was lost in flight
            job_id = exc.ids[0]
            detail = (
                f"database unavailable; job {job_id} may have been stored: GET /jobs/{job_id} before sending it again"
            )
            return error_response(503, detail, _retry_after())
        return error_response(503, "database unavailable; retry later", _retry_after())
    if status == 500:
        log.error("api.error error=%s: %s", type(exc).__name__, exc)
        return error_response(500, "internal server error")
    return error_response(status, str(exc), _retry_after() if status == 429 else None)


def _unexpected(exc: Exception) -> Response:
    # Where it failed, not what it said: a database error's message can quote a value
    # from the request (a payload), which must never reach the log.
    log.error(
        "api.unhandled error=%s path=%s\n%s",
        type(exc).__name__, request.path, "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
    )
    return error_response(500, "internal server error")


def _retry_after() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_SECONDS)}
