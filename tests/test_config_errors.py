"""A bad configuration value stops start-up once, clearly: one line naming the variable
and the configuration exit code, within seconds, before any child is forked (the
supervisor, a one-shot command, Gunicorn with the Procfile's config); and the crash
loops that remain (a database that is down) stay quiet."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobq.daemon.maintenance.duties import Maintenance
from jobq.logs import RepeatSummary
from jobq.settings import EXIT_CONFIG, Settings
from support.cli import run_cli

pytestmark = pytest.mark.daemon

CHECKOUT = Path(__file__).resolve().parent.parent
STARTUP_DEADLINE = 10.0  # generous: the issue asks for 3 s on an idle machine; measured ~0.5 s


def _stops_in_one_line(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    bare = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", **env}
    result = subprocess.run(argv, env=bare, capture_output=True, text=True, timeout=STARTUP_DEADLINE, cwd=CHECKOUT)
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert 1 <= len(lines) <= 3 and "Traceback" not in result.stderr, lines
    assert any(line.startswith("jobq: DATABASE_URL:") for line in lines), lines
    return result


@pytest.mark.parametrize("command", [["worker"], ["inspect"], ["migrate"], ["queues", "list"]])
def test_a_malformed_database_url_stops_the_command_in_one_line_naming_it(command):
    _stops_in_one_line([sys.executable, "-m", "jobq", *command], DATABASE_URL="not-a-url")


def test_a_malformed_database_url_stops_gunicorn_before_it_forks_a_worker():
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    _stops_in_one_line([gunicorn, "-c", "deploy/gunicorn.conf.py", "web.app:create_app()"],
                       DATABASE_URL="not-a-url", PORT="1")


def test_the_message_never_repeats_the_value_which_may_hold_a_password():
    result = run_cli("inspect", DATABASE_URL="postgresql//me:s3cret@db/app")
    assert result.returncode == EXIT_CONFIG and "s3cret" not in result.stderr
    assert result.stderr.startswith("jobq: DATABASE_URL: is not a PostgreSQL URL")


def test_maintenance_waits_for_its_next_connect_attempt_while_the_database_is_down(tmp_path):
    """It used to spin (tens of thousands of passes a second) once its leader's pass was due."""
    command_read, command_write = os.pipe()
    control_read, control_write = os.pipe()
    settings = Settings.from_env({"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    m = Maintenance(settings, command_read, control_write)
    try:
        from jobq.daemon.wakeup import SelfPipe

        m.wakeup = SelfPipe()
        m.control = _NoListener()
        m.next_lead = time.monotonic() - 60  # a leader's pass long due
        passes, started = 0, time.monotonic()
        while time.monotonic() - started < 1.5:
            m.tick()
            m.wait()
            passes += 1
        assert m.conn is None and passes < 20, passes  # one per connect attempt (0.5 s, 1 s, ...)
    finally:
        for fd in (command_read, command_write, control_read, control_write):
            os.close(fd)


class _NoListener:
    def fileno(self) -> int | None:
        return None


def test_repeated_warnings_are_printed_at_most_once_a_second_then_summarised():
    summary = RepeatSummary(interval=0.5)

    def record(msg: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("jobq.x", level, __file__, 1, msg, None, None)

    assert summary.filter(record("db down"))
    assert not any(summary.filter(record("db down")) for _ in range(1000))
    assert summary.filter(record("something else"))
    assert summary.filter(record("info repeats", logging.INFO)) and summary.filter(record("info repeats", logging.INFO))
    time.sleep(0.6)
    again = record("db down")
    assert summary.filter(again) and again.getMessage() == "db down (repeated 1000 more times, not shown)"
