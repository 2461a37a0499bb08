"""The maintenance process's duties, driven in process against the real database: one
duty's error is logged with its name, counted, and the duty runs again next pass,
while the others go on running."""

from __future__ import annotations

import logging
import os
import time

import pytest

import jobq
from jobq.daemon import messages
from jobq.daemon.maintenance.duties import ERROR_COUNTER, Duty, Maintenance
from jobq.settings import Settings
from support.claims import claim

pytestmark = [pytest.mark.db, pytest.mark.reaper]


@pytest.fixture
def control_pipe():
    """The pipe the maintenance process tells the supervisor of cancels and pauses on."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


@pytest.fixture
def maintenance(database_url, control_pipe):
    command_read, command_write = os.pipe()
    m = Maintenance(Settings.from_env({"DATABASE_URL": database_url}), command_read, control_pipe[1])
    assert m.connect()
    yield m
    m.disconnect()
    for fd in (command_read, command_write):
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


@pytest.mark.control
def test_a_cancel_made_before_the_control_listener_first_listens_is_passed_on(
    maintenance, control_pipe, conn, database_url
):
    # The workers start beside the maintenance process: one may claim a job, and an
    # operator cancel it, before the process listens on the control channel.
    early = jobq.enqueue("noop", conn=conn)
    (claimed,) = claim(conn, 1, worker_id=f"{maintenance.settings.hostname}:1:early")
    assert claimed.job.id == early.id
    jobq.cancel(early.id, conn=conn)
    maintenance.listen_for_control(database_url)
    try:
        maintenance.pass_on_control()
        later = jobq.enqueue("noop", conn=conn)
        claim(conn, 1, worker_id=f"{maintenance.settings.hostname}:1:later")
        jobq.cancel(later.id, conn=conn)  # heard: its NOTIFY comes after the LISTEN
        time.sleep(0.2)
        maintenance.pass_on_control()
        told, _ = messages.Reader(control_pipe[0]).read()
    finally:
        maintenance.control.close()
    assert told == [messages.Cancel(early.id), messages.Cancel(later.id)]
