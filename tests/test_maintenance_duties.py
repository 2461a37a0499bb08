"""The maintenance process's duties, driven in process against the real database: one
duty's error is logged with its name, counted, and the duty runs again next pass,
while the others go on running."""

from __future__ import annotations

import logging
import os

import pytest

import jobq
from jobq.daemon.maintenance.duties import ERROR_COUNTER, Duty, Maintenance
from jobq.settings import Settings

pytestmark = [pytest.mark.db, pytest.mark.reaper]


@pytest.fixture
def maintenance(database_url):
    command_read, command_write = os.pipe()
    control_read, control_write = os.pipe()
    m = Maintenance(Settings.from_env({"DATABASE_URL": database_url}), command_read, control_write)
    assert m.connect()
    yield m
    m.disconnect()
    for fd in (command_read, command_write, control_read, control_write):
        os.close(fd)


def test_a_failing_duty_is_logged_counted_and_run_again_next_pass_while_the_others_run(maintenance, conn, caplog):
    ran: list[str] = []

    def failing(c) -> int:
        ran.append("failing")
        c.execute("SELECT 1 / 0")  # an error of the duty itself, not of the connection
        return 0

    maintenance.duties = [Duty("failing", 0.0, failing), Duty("next", 0.0, lambda c: ran.append("next") or 0)]
    with caplog.at_level(logging.ERROR, logger="jobq.daemon.maintenance.duties"):
        maintenance.lead()
        maintenance.lead()  # the next pass: the failed duty is due again
    assert maintenance.leader and maintenance.conn is not None and not maintenance.conn.closed
    assert ran == ["failing", "next", "failing", "next"]
    assert caplog.text.count("maintenance.duty_failed duty=failing error=DivisionByZero") == 2
    assert jobq.counts(conn=conn).totals[ERROR_COUNTER] == 2
