"""Gunicorn's access log for the API: one line per request, built from the few values
it shows (``logger_class`` in ``deploy/gunicorn.conf.py``).

Gunicorn's own logger builds, for every request, a dictionary of every request and
response header and every WSGI variable, so that any of them may be named in
``access_log_format``; this one offers only the client address, method, path (never
the query string), protocol, status, size and duration. A format naming anything else
(``%(q)s``, ``%({authorization}i)s``) prints ``-``: no token, query string or
payload can reach the log, and the line costs a fraction of the work.
"""

from __future__ import annotations

import datetime
from typing import Any

from gunicorn import glogging


class AccessLogger(glogging.Logger):
    """Gunicorn's logger (error log and access log), with access lines made cheaply."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: datetime.timedelta) -> dict[str, Any]:
        status = resp.status
        return {
            "h": environ.get("REMOTE_ADDR", "-"),
            "m": environ.get("REQUEST_METHOD"),
            "U": environ.get("PATH_INFO"),
            "H": environ.get("SERVER_PROTOCOL"),
            "s": status.split(None, 1)[0] if isinstance(status, str) else status,
            "B": getattr(resp, "sent", None),
            "M": request_time.seconds * 1000 + request_time.microseconds // 1000,
        }
