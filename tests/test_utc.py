"""A session whose server zone is UTC by another name is named UTC (jobq.store.utc), so
that psycopg reads its timestamps with datetime.timezone.utc; any other zone is kept."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from psycopg import pq
from psycopg.conninfo import make_conninfo

from jobq.store import connections

pytestmark = pytest.mark.db

NOON_UTC = "SELECT '2026-12-06 12:00:00+00'::timestamptz"


@pytest.mark.parametrize("zone", ["Etc/UTC", "Etc/Universal", "Zulu"])
def test_a_server_in_utc_by_another_name_gives_jobqs_sessions_utc(database_url, zone):
    url = make_conninfo(database_url, options=f"-c TimeZone={zone}")
    for autocommit in (True, False):
        with connections.connect(url, autocommit=autocommit) as conn:
            assert conn.info.parameter_status("TimeZone") == "UTC"
            assert conn.info.transaction_status == pq.TransactionStatus.IDLE  # nothing left open
            (moment,) = conn.execute(NOON_UTC).fetchone()
            assert moment == datetime(2026, 12, 6, 12, tzinfo=timezone.utc) and moment.tzinfo is timezone.utc


def test_a_server_in_another_zone_keeps_it_and_its_offsets(database_url):
    url = make_conninfo(database_url, options="-c TimeZone=Europe/Berlin")
    with connections.connect(url) as conn:
        assert conn.info.parameter_status("TimeZone") == "Europe/Berlin"
        (moment,) = conn.execute(NOON_UTC).fetchone()
        assert moment == datetime(2026, 12, 6, 12, tzinfo=timezone.utc)
        assert moment.utcoffset() == timedelta(hours=1) and moment.hour == 13
    with connections.connect(make_conninfo(database_url, options="-c TimeZone=GMT")) as conn:
        assert conn.info.parameter_status("TimeZone") == "GMT"  # offset 0, but its abbreviation is GMT
