"""Who may use the dashboard, and protection of its actions against other sites.

- With ``JOBQ_API_TOKEN`` set, the login form asks for the token once and answers with
  a session cookie: signed (itsdangerous), ``HttpOnly``, ``SameSite=Strict``, ``Path=/dashboard``
  (never sent to the API, which stays bearer-only), ``Secure`` over HTTPS, valid
  :data:`SESSION_MAX_AGE` seconds. It holds a random session id and a fingerprint of the
  token: changing the token ends every session. Without a token the dashboard is open
  and every browser gets an anonymous session, for the CSRF token alone.
- The signing key is ``JOBQ_SECRET_KEY``; unset, it is derived from the token, or without
  one from the database's audit key: the same in every Gunicorn process.
- Every POST carries the session's CSRF token (an HMAC of its id) in a form field, and a
  POST whose ``Origin`` is another site is refused; the cookie's SameSite=Strict keeps
  it from cross-site requests anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Response, current_app, g, redirect, render_template, request, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.exceptions import Forbidden, Unauthorized

from jobq.jobs import audit
from web.context import api
from web.dashboard.blueprints import PREFIX, pages

COOKIE = "jobq_dashboard"
SESSION_MAX_AGE = 12 * 3600  # seconds a login lasts
OPEN = frozenset({"dashboard.login", "dashboard.static"})
LIVE_HEADER = "X-Jobq-Live"  # the live refresh's requests (dashboard.js)
_KEY = "jobq_dashboard_key"  # app.extensions: the signing key, computed once per process


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str


def guard() -> Response | None:
    """``before_request`` of both blueprints: a valid session, or the login form (401
    for the live refresh and for actions); and on a POST, the CSRF checks."""
    if request.endpoint in OPEN:
        return None
    session = _read_session()
    if session is None:
        if api().settings.api_token:
            if request.method == "GET" and LIVE_HEADER not in request.headers:
                return redirect(url_for("dashboard.login", next=request.full_path.rstrip("?")))
            raise Unauthorized("log in to the dashboard first")
        session = _new_session()
        g.dashboard_new_cookie = True
    g.dashboard_session = session
    if request.method == "POST":
        check_origin()
        given = request.form.get("csrf", "")
        if not hmac.compare_digest(given.encode(), session.csrf.encode()):
            raise Forbidden("missing or invalid CSRF token: reload the page and try again")
    return None


def set_cookie_if_new(response: Response) -> Response:
    """``after_request``: hand a new anonymous session its cookie."""
    if g.get("dashboard_new_cookie"):
        _set_cookie(response, g.dashboard_session)
    return response


def check_origin() -> None:
    """Refuse a POST sent by a page of another site: the browser names the page's origin
    in ``Origin``, whose host must be the one the request was sent to (the scheme is not
    compared: behind a proxy that ends TLS the app sees http for an https page)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return
    if origin == "null" or urlsplit(origin).netloc != request.host:
        raise Forbidden("cross-site request refused")


def actor() -> str:
    """Who the current dashboard request acts as, for the audit trail:
    ``dashboard:<the token's 16 hex digits>`` (as ``api:`` for the same token)."""
    with api().database.connection() as conn:
        return audit.dashboard_actor(conn, api().settings.api_token)


def csrf_token() -> str:
    session = g.get("dashboard_session")
    return session.csrf if session else ""


@pages.route("/login", methods=["GET", "POST"])
def login() -> Response | str | tuple[str, int]:
    """The login form (only with a token set): the token, once; then the cookie."""
    token = api().settings.api_token
    target = _safe_next(request.values.get("next"))
    if not token:
        return redirect(target)
    if request.method == "GET":
        return render_template("dashboard/login.html", title="Log in", next=target, failed=False)
    check_origin()
    given = request.form.get("token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return render_template("dashboard/login.html", title="Log in", next=target, failed=True), 401
    response = redirect(target)
    _set_cookie(response, _new_session())
    return response


def logout() -> Response:
    """Forget the session (a POST with the CSRF token, see :mod:`web.dashboard.pages`)."""
    response = redirect(url_for("dashboard.login") if api().settings.api_token else url_for("dashboard.overview"))
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


def _safe_next(value: str | None) -> str:
    """Only a path of the dashboard's own: never an open redirect."""
    if value and value.startswith(PREFIX) and not value.startswith("//") and "\\" not in value:
        return value
    return url_for("dashboard.overview")


def _serializer() -> URLSafeTimedSerializer:
    key = current_app.extensions.get(_KEY)
    if key is None:
        key = current_app.extensions[_KEY] = _signing_key()
    return URLSafeTimedSerializer(key, salt="jobq-dashboard-session")


def _signing_key() -> bytes:
    settings = api().settings
    if settings.secret_key:
        return settings.secret_key.encode()
    if settings.api_token:
        return hashlib.sha256(b"jobq dashboard\0" + settings.api_token.encode()).digest()
    with api().database.connection() as conn:
        return hmac.new(audit.server_key(conn), b"jobq dashboard", hashlib.sha256).digest()


def _token_fingerprint(key: bytes) -> str:
    token = api().settings.api_token or ""
    return hmac.new(key, b"token\0" + token.encode(), hashlib.sha256).hexdigest()[:16]


def _new_session() -> Session:
    return _session_of(secrets.token_urlsafe(18))


def _session_of(session_id: str) -> Session:
    key = _serializer().secret_key
    csrf = hmac.new(key, b"csrf\0" + session_id.encode(), hashlib.sha256).hexdigest()[:32]
    return Session(session_id, csrf)


def _read_session() -> Session | None:
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    serializer = _serializer()
    try:
        data = serializer.loads(raw, max_age=SESSION_MAX_AGE)
    except BadSignature:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("sid"), str):
        return None
    if not hmac.compare_digest(str(data.get("tok", "")), _token_fingerprint(serializer.secret_key)):
        return None
    return _session_of(data["sid"])


def _set_cookie(response: Response, session: Session) -> None:
    serializer = _serializer()
    value = serializer.dumps({"sid": session.id, "tok": _token_fingerprint(serializer.secret_key)})
    response.set_cookie(
        COOKIE, value, max_age=SESSION_MAX_AGE, path=PREFIX, httponly=True, samesite="Strict",
        secure=_over_https(),
    )


def _over_https() -> bool:
    """HTTPS to the app, or to the proxy in front of it (its X-Forwarded-Proto: a false
    one could only make a browser keep the cookie for HTTPS, which harms nobody)."""
    return request.is_secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
