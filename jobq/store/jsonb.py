"""How jobq's own connections read json and jsonb: with orjson, about ten times faster
than the standard library's ``json.loads`` on the bytes psycopg hands over (0.07 µs
against 1.3 µs for ``{}``; 0.3 against 1.9 µs for a small object). A worker decodes
every claimed job's payload and errors, and this was a fifth of its claim's CPU
(benchmark/README.md, "Where a worker's CPU goes").

The values are the standard library's: the same types, the same numbers. Two kinds of
text PostgreSQL holds are decoded by ``json.loads`` instead, as before: what orjson
refuses (a number out of a float's range), and any text with a run of 19 digits, which
may be an integer beyond 64 bits (orjson would make it a float, silently).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import psycopg
from psycopg.types.json import set_json_loads


# 19 digits in a row: perhaps an integer beyond 64 bits (9223372036854775807 has 19).
_LONG_DIGITS = re.compile(r"\d{19}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{19}")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """JSON text as Python values, the standard library's (see the module's docstring)."""
    if isinstance(data, memoryview):
        data = bytes(data)
    if (_LONG_DIGITS if isinstance(data, str) else _LONG_DIGITS_BYTES).search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def use_for(conn: psycopg.Connection[Any]) -> None:
    """Read json and jsonb on ``conn`` with :func:`loads`."""
    set_json_loads(loads, conn)
