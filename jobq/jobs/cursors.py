"""The opaque cursor of a listing newest first (``GET /jobs?cursor=``,
:func:`jobq.list_jobs`): the (created_at, id) of the last row a page showed, so that
the next page is read by a keyset predicate, ``(created_at, id) < (...)``, along the
listing's own index, instead of an OFFSET that reads and drops every row before it.

It is URL-safe base64 of a small JSON array, unpadded; clients must treat it as opaque.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from jobq.errors import InvalidArgument
from jobq.jobs.filters import MAX_ID

MAX_CURSOR_LENGTH = 200

_BAD = "is not a cursor a listing answered (pass next_cursor as it came)"


def encode(created_at: datetime, row_id: int) -> str:
    """The cursor after the row (``created_at``, ``row_id``)."""
    text = json.dumps([created_at.isoformat(), row_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: object, field: str = "cursor") -> tuple[datetime, int]:
    """The (created_at, id) a cursor holds; :class:`InvalidArgument` naming ``field`` for
    anything :func:`encode` did not make."""
    if not isinstance(cursor, str) or not 1 <= len(cursor) <= MAX_CURSOR_LENGTH:
        raise InvalidArgument(field, _BAD)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, row_id = json.loads(raw)
        moment = datetime.fromisoformat(created)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidArgument(field, _BAD) from None
    if moment.tzinfo is None or isinstance(row_id, bool) or not isinstance(row_id, int) or not 1 <= row_id <= MAX_ID:
        raise InvalidArgument(field, _BAD)
    return moment, row_id
