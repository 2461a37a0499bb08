"""The system under test, started as the Procfile starts it: Gunicorn with
``deploy/gunicorn.conf.py`` and ``jobq worker``, against a database URL (an embedded
PostgreSQL 16 with default settings when none is given, see common.database)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = Path(tempfile.gettempdir()) / "jobq-bench-logs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gunicorn(
    url: str, *, port: int | None = None, env: dict[str, str] | None = None, app: str = "web.app:create_app()"
) -> Iterator[str]:
    """Gunicorn as the Procfile's ``web:`` line runs it (serving ``app``, jobq's API by
    default); yields its base URL once ``/health`` answers."""
    port = port or free_port()
    LOG_DIR.mkdir(exist_ok=True)
    log = LOG_DIR / f"web-{port}.log"
    environ = {**os.environ, "DATABASE_URL": url, "PORT": str(port), **(env or {})}
    command = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), app]
    with open(log, "w") as out:
        server = subprocess.Popen(command, env=environ, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gunicorn did not start; see {log}") from None
                time.sleep(0.1)
        yield base
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


@contextmanager
def workers(
    url: str, concurrency: int, *, env: dict[str, str] | None = None, log_name: str = "worker"
) -> Iterator[subprocess.Popen]:
    """``jobq worker --concurrency N`` (the Procfile's ``worker:`` line), stopped with TERM;
    its output in ``<log_name>.log``."""
    LOG_DIR.mkdir(exist_ok=True)
    environ = {**os.environ, "DATABASE_URL": url, "JOBQ_CONCURRENCY": str(concurrency), **(env or {})}
    with open(LOG_DIR / f"{log_name}.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jobq", "worker"], env=environ, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
