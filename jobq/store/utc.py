"""A session whose server zone is UTC under another name is told ``UTC``.

psycopg reads a timestamptz of a session in ``UTC`` with ``datetime.timezone.utc`` and,
in any other zone, through ``zoneinfo`` (0.37 µs a value against 0.14 on this
machine's PostgreSQL 15, where Debian's initdb writes ``timezone = 'Etc/UTC'``); a
claimed job has four, every listed job six. The same instants, the same offsets, and
the same results of every SQL function of the session: only the name changes. A server
in any other zone is left as it is: its sessions' values keep its zone.
"""

from __future__ import annotations

import psycopg

# The zone database's other names of UTC (offset 0, never a daylight saving time, "UTC"
# as its abbreviation). The GMT names are left alone: their abbreviation is GMT.
UTC_ALIASES = frozenset({"Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu"})


def use_for(conn: psycopg.Connection) -> None:
    """Name the session's zone ``UTC`` when the server's is UTC by another name."""
    if conn.info.parameter_status("TimeZone") not in UTC_ALIASES:
        return
    conn.execute("SET TimeZone = 'UTC'")
    if not conn.autocommit:
        conn.commit()
