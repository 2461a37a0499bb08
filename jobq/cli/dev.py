"""`jobq dev`: the whole system on one machine, from one command.

Unless ``DATABASE_URL`` is set, an embedded PostgreSQL 16 (the ``pgserver`` wheel)
runs with its data in ``.jobq/pg`` (kept between runs; ``--reset`` starts empty).
Then the Procfile's ``release`` step runs (migrate), and its ``web`` and ``worker``
processes run side by side under honcho, their output prefixed on this terminal.
Ctrl-C stops them (running jobs get JOBQ_GRACEFUL_TIMEOUT to finish), then the
embedded server.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from jobq.errors import ConfigError
from jobq.settings import Settings
from jobq.store import connections
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate

PROCESSES = ("web", "worker")  # the Procfile's release step runs here, in-process


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
        _banner(port, where, len(applied), settings.dashboard)
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


def _banner(port: int, where: str, migrations: int, dashboard: str) -> None:
    click.echo("")
    if dashboard != "off":
        shown = "" if dashboard == "full" else f"   ({dashboard})"
        click.echo(f"  dashboard    http://127.0.0.1:{port}/dashboard{shown}")
    click.echo(f"  jobq API     http://127.0.0.1:{port}   (docs: http://127.0.0.1:{port}/docs)")
    click.echo(f"  database     {where}" + (f"; {migrations} migration(s) applied" if migrations else ""))
    click.echo("  logs         web and worker output below, prefixed by process")
    click.echo("  stop         Ctrl-C (running jobs get JOBQ_GRACEFUL_TIMEOUT to finish)")
    click.echo("")
