"""The audit trail: every operator action (pause, resume, cancel, retry, run now,
delete, bulk operations, dead-letter group actions) leaves one row in ``jobq_audit``:
when, who, what, on what, and how many rows it changed.

Who: :func:`cli_actor` for the command line (the OS user), :func:`api_actor` for the
API (an HMAC of the bearer token under a key that lives in the database, so that two
calls with one token are recognisably the same actor and the token itself is never
stored), :func:`library_actor` for code that calls jobq directly.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobq.store.sql.audit import AUDIT_DELETE_BEFORE, AUDIT_INSERT, AUDIT_KEY_GET, AUDIT_LIST
from jobq.store.connections import Connection, connection

DEFAULT_LIMIT = 50
PRUNE_BATCH = 5_000

_KEYS: dict[str, bytes] = {}  # the audit key, per database URL; read once per process


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    at: datetime
    actor: str
    action: str
    target: dict[str, Any]
    counts: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "counts": self.counts,
        }


def record(conn: Connection, actor: str, action: str, target: dict[str, Any], counts: dict[str, Any]) -> int:
    """Write one audit row on ``conn``, in the caller's transaction (so that the action
    and its record commit together); returns its id."""
    row = conn.execute(
        AUDIT_INSERT,
        {"actor": actor, "action": action, "target": json.dumps(target, default=str), "counts": json.dumps(counts)},
    ).fetchone()
    assert row is not None
    return int(row[0])


def entries(*, limit: int = DEFAULT_LIMIT, before: int | None = None, conn: Connection | None = None) -> list[Entry]:
    """Audit rows newest first; ``before`` (an id) gives the page after the one ending there."""
    with connection(conn) as c:
        rows = c.execute(AUDIT_LIST, {"limit": limit, "before": before}).fetchall()
    return [Entry(*row) for row in rows]


def prune(conn: Connection, older_than: float) -> int:
    """Delete audit rows older than ``older_than`` seconds; returns how many."""
    deleted = 0
    while True:
        n = conn.execute(AUDIT_DELETE_BEFORE, {"older_than": older_than, "batch": PRUNE_BATCH}).rowcount
        conn.commit()
        deleted += n
        if n < PRUNE_BATCH:
            return deleted


def cli_actor() -> str:
    """``cli:<os user>@<host>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


def library_actor() -> str:
    """``lib:<os user>@<host>:<pid>``: a program calling jobq's functions itself."""
    return f"lib:{cli_actor()[4:]}:{os.getpid()}"


def api_actor(conn: Connection, token: str | None) -> str:
    """``api:<first 16 hex digits of HMAC-SHA256(key, token)>``, or ``api:anonymous``
    when the API runs without a token."""
    return "api:" + _token_id(conn, token)


def dashboard_actor(conn: Connection, token: str | None) -> str:
    """``dashboard:<the same 16 hex digits as the token's api: actor>``, or
    ``dashboard:anonymous`` when the dashboard runs without a token."""
    return "dashboard:" + _token_id(conn, token)


def server_key(conn: Connection) -> bytes:
    """The audit key of the database ``conn`` is on (``jobq_keys``, made by the migration;
    the same for every process), read once per process."""
    url = conn.info.dsn
    if url not in _KEYS:
        row = conn.execute(AUDIT_KEY_GET).fetchone()
        assert row is not None, "jobq_keys has no audit key: run jobq migrate"
        _KEYS[url] = bytes(row[0])
    return _KEYS[url]


def _token_id(conn: Connection, token: str | None) -> str:
    if not token:
        return "anonymous"
    return hmac.new(server_key(conn), token.encode(), hashlib.sha256).hexdigest()[:16]
