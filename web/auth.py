"""Bearer-token authentication: with ``JOBQ_API_TOKEN`` set, every route but the open
ones needs ``Authorization: Bearer <token>``. The token is compared in constant time
and never logged."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection

from flask import request
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Unauthorized

from jobq.jobs import audit
from jobq.store.connections import Connection


def bearer_guard(
    token: str, open_endpoints: Collection[str], own_guard: Collection[str] = ()
) -> Callable[[], None]:
    """A ``before_request`` hook that raises 401 unless the request carries ``token``
    (or its endpoint is one of ``open_endpoints``, or it belongs to a blueprint of
    ``own_guard``, which checks its requests itself: the dashboard's login cookie)."""
    expected = token.encode()

    def check() -> None:
        if request.endpoint in open_endpoints or request.blueprint in own_guard:
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise Unauthorized("missing or invalid bearer token", www_authenticate=WWWAuthenticate("bearer"))

    return check


def request_actor(conn: Connection) -> str:
    """Who the current request acts as, for the audit trail: an HMAC of its bearer token
    (:func:`jobq.jobs.audit.api_actor`), never the token."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return audit.api_actor(conn, given.strip() if scheme.lower() == "bearer" else None)
