"""A real Gunicorn serving the API on a loopback port, and a small HTTP client for it.

Gunicorn runs as the Procfile runs it (``deploy/gunicorn.conf.py``), from a temporary
directory so that it imports the installed ``web`` package, with two workers.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.ports import free_port

GUNICORN_CONF = Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"
START_TIMEOUT = 30.0
PORT_TRIES = 3


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WebServer:
    """``gunicorn -c deploy/gunicorn.conf.py 'web.app:create_app()'`` with its output in a file."""

    def __init__(self, database_url: str, workdir: Path, **env: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log_path = workdir / "gunicorn.log"
        self.env = {**os.environ, "DATABASE_URL": database_url, "PORT": str(self.port), "WEB_CONCURRENCY": "2", **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WebServer:
        """Return once this Gunicorn listens on its port (its log says so, with its pid)
        and answers /health. A port another test process took since free_port() chose it
        (the suite runs in parallel) is given up for a new one."""
        for _ in range(PORT_TRIES):
            seen = len(self.log()) if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "web.app:create_app()"],
                    env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )
            listening = f"Listening at: http://0.0.0.0:{self.port} ({self.proc.pid})"
            deadline = time.monotonic() + START_TIMEOUT
            while not (listening in self.log()[seen:] and self._answers()):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            else:
                return self
            if "Connection in use" not in self.log()[seen:]:
                break
            self.stop()
            self.port = free_port()
            self.env["PORT"] = str(self.port)
        raise RuntimeError(f"gunicorn did not start:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        """One request on a new connection. ``body`` is sent as JSON; ``raw`` as given
        (an iterable of chunks goes chunked, without a Content-Length)."""
        headers = dict(headers or {})
        if body is not None:
            raw = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            chunked = raw is not None and not isinstance(raw, bytes)
            connection.request(method, path, body=raw, headers=headers, encode_chunked=chunked)
            response = connection.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            connection.close()

    def _answers(self) -> bool:
        try:
            return self.request("GET", "/health", timeout=1).status == 200
        except OSError:
            return False

