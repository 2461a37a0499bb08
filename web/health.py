"""``/health`` (liveness: the process answers; no database) and ``/ready`` (the
database answers)."""

from __future__ import annotations

from flask_openapi3 import APIBlueprint, Tag

from jobq.store.connections import ping
from web.context import api
from web.blueprints import BEARER, GUARDED
from web.schemas import Health

health = APIBlueprint("health", __name__, abp_tags=[Tag(name="health")])

OK = {"status": "ok"}


@health.get("/health", responses={200: Health})
def liveness() -> dict:
    """Liveness: 200 while the process serves requests. Needs no token, touches no database."""
    return OK


@health.get("/ready", responses={200: Health, **GUARDED}, security=BEARER)
def readiness() -> dict:
    """Readiness: 200 when the database answers, 503 (with Retry-After) when it does not."""
    with api().database.connection() as conn:
        ping(conn)
    return OK
