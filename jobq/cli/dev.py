"""`jobq dev`: the whole system on one machine, from one command.

Unless ``DATABASE_URL`` is set, an embedded PostgreSQL 16 (the ``pgserver`` wheel)
runs with its data in ``.jobq/pg`` (kept between runs; ``--reset`` starts empty).
Then the Procfile's ``release`` step runs (migrate), and its ``web`` and ``worker``
processes run side by side under honcho, their output prefixed on this terminal.
Ctrl-C stops them (running jobs get JOBQ_GRACEFUL_TIMEOUT to finish), then the
embedded server. While it runs, the other ``jobq`` commands of this checkout find the
embedded server without ``DATABASE_URL`` (:mod:`jobq.cli.dev_database`). Once the API
answers, a banner ends with the dashboard's address and the database URL.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import click

from jobq.cli import dev_database
from jobq.errors import ConfigError
from jobq.settings import Settings
from jobq.store import connections
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate

PROCESSES = ("web", "worker")  # the Procfile's release step runs here, in-process
READY_PATIENCE = 120.0  # seconds the banner waits for the API to accept connections


def run(settings: Settings, *, data_dir: Path, procfile: Path, port: int, reset: bool) -> int:
    """Run the system until Ctrl-C; return the exit code."""
    import honcho.manager

    commands = _commands(procfile)
    if reset and data_dir.exists():
        EmbeddedPostgres(data_dir / "pg").delete()
        shutil.rmtree(data_dir)
        click.echo(f"jobq dev: removed {data_dir} (--reset)")
    server = None
    url = settings.database_url
    if url is None:
        server = EmbeddedPostgres(data_dir / "pg")
        click.echo(f"jobq dev: starting the embedded PostgreSQL 16 in {server.data_dir} ...")
        server.start()
        url = server.url()
        dev_database.publish(data_dir, url)
        where = f"embedded PostgreSQL 16, data in {server.data_dir}, server log {server.log_file}"
    else:
        where = "DATABASE_URL (your server)"
    try:
        with connections.connect(url) as conn, connections.database_errors():
            applied = migrate(conn, namespace=settings.advisory_namespace, schema=settings.db_schema)
        env = {
            **os.environ,
            # The Procfile names gunicorn and jobq: find this environment's, activated or not.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "DATABASE_URL": url,
            "PORT": str(port),
            # Listen on this machine only; the Procfile's config binds every interface.
            "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{port} {os.environ.get('GUNICORN_CMD_ARGS', '')}".strip(),
            "PYTHONUNBUFFERED": "1",
        }
        if not os.environ.get("JOBQ_QUEUES"):
            env.setdefault("JOBQ_ALL_QUEUES", "true")  # one worker serves every queue the tour uses
        banner = _Banner(port, url if server is not None else None, where, len(applied), settings.dashboard)
        threading.Thread(target=banner.print_when_ready, name="jobq dev banner", daemon=True).start()
        # honcho SIGKILLs what is still running this long after Ctrl-C: leave the
        # workers their graceful timeout first.
        honcho.manager.KILL_WAIT = int(settings.graceful_timeout) + 5
        manager = honcho.manager.Manager()
        for name in PROCESSES:
            manager.add_process(name, commands[name], env=env, cwd=str(procfile.parent))
        manager.loop()
        return int(manager.returncode or 0) if manager.returncode not in (130, 143) else 0
    finally:
        if server is not None:
            dev_database.withdraw(data_dir)
            server.stop()
            click.echo("jobq dev: embedded PostgreSQL stopped; the data stays for next time (--reset to start empty)")


def _commands(procfile: Path) -> dict[str, str]:
    from honcho.environ import parse_procfile

    if not procfile.is_file():
        raise ConfigError("--procfile", f"{procfile} not found: run jobq dev from the jobq checkout")
    processes = parse_procfile(procfile.read_text()).processes
    missing = [name for name in PROCESSES if name not in processes]
    if missing:
        raise ConfigError("--procfile", f"{procfile} has no {' or '.join(missing)} line")
    # exec: the process replaces honcho's shell, so that it gets the TERM itself and
    # honcho waits for its graceful exit, not just the shell's.
    return {name: f"exec {command}" for name, command in processes.items()}


class _Banner:
    """What to open and how to stop, printed once the API accepts connections (after
    the processes' start-up lines, so that it is what a newcomer sees last)."""

    def __init__(self, port: int, url: str | None, where: str, migrations: int, dashboard: str) -> None:
        self.port, self.url, self.where, self.migrations, self.dashboard = port, url, where, migrations, dashboard

    def print_when_ready(self) -> None:
        deadline = time.monotonic() + READY_PATIENCE
        while time.monotonic() < deadline and not self._api_listening():
            time.sleep(0.2)
        click.echo("\n".join(self.lines()))

    def _api_listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def lines(self) -> list[str]:
        port = self.port
        applied = f"; {self.migrations} migration(s) applied" if self.migrations else ""
        lines = ["", f"  jobq API     http://127.0.0.1:{port}   (docs: http://127.0.0.1:{port}/docs)",
                 f"  database     {self.where}{applied}",
                 "  logs         web and worker output above, prefixed by process",
                 "  stop         Ctrl-C (running jobs get JOBQ_GRACEFUL_TIMEOUT to finish)"]
        if self.url is not None:
            lines.append(f"  DATABASE_URL {self.url}   (jobq commands in this checkout use it when unset)")
        if self.dashboard != "off":
            shown = "" if self.dashboard == "full" else f"   ({self.dashboard})"
            lines.append(f"  dashboard    http://127.0.0.1:{port}/dashboard{shown}")
        return lines + [""]
