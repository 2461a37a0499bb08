"""An embedded PostgreSQL 16 server from the ``pgserver`` wheel, for ``jobq dev``, the
tests and the benchmarks.

pgserver ships the PostgreSQL binaries; this module drives them directly with
``initdb`` and ``pg_ctl`` so that a caller can stop and restart its own instance.
PostgreSQL refuses to run as root, so as root the server runs as an unprivileged
user (``pgserver``, created if needed). ``pg_ctl`` always gets ``-l logfile``:
without it the server would inherit the caller's pipes and the call would never
return. The server listens on a Unix socket, and on loopback TCP when given a port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

from jobq.errors import ConfigError

SERVER_USER = "pgserver"
SUPERUSER = "postgres"
MAX_SOCKET_DIR_LENGTH = 80  # a Unix socket path must stay under 108 bytes


def binaries() -> Path:
    """The directory holding pgserver's PostgreSQL binaries."""
    try:
        with warnings.catch_warnings():
            # pgserver's import asks platformdirs for a runtime dir it does not need here
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise ConfigError(
            "DATABASE_URL",
            "is not set and the embedded PostgreSQL is not installed: pip install 'jobq[dev]' "
            "(CPython 3.11-3.12), or point DATABASE_URL at a server",
        ) from None
    return Path(POSTGRES_BIN_PATH)


class EmbeddedPostgres:
    """One PostgreSQL instance living in ``base_dir``: its data in ``data/`` (kept
    between runs), its log in ``postgres.log``, its socket beside them."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "postgres.log"
        self.port = port
        self.settings = dict(settings or {})
        self._socket_dir: Path | None = None
        self._as_root = os.geteuid() == 0

    @property
    def socket_dir(self) -> Path:
        if self._socket_dir is None:
            if len(str(self.base_dir)) <= MAX_SOCKET_DIR_LENGTH:
                self._socket_dir = self.base_dir
            else:
                self._socket_dir = Path(tempfile.mkdtemp(prefix="jobq-pg-"))
                os.chmod(self._socket_dir, 0o777)
        return self._socket_dir

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL for this server (the Unix socket)."""
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}&port={self.port or 5432}"

    @property
    def initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    @property
    def running(self) -> bool:
        result = self._run(["pg_ctl", "-D", str(self.data_dir), "status"], check=False)
        return result.returncode == 0

    def start(self) -> None:
        """Create the cluster if needed and start the server; return once it accepts
        connections."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            self._prepare_for_server_user()
        if not self.initialised:
            self._run(["initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                       "--encoding=UTF8", "--no-sync"])
        if self.running:
            return
        options = [f"-k {self.socket_dir}", f"-p {self.port or 5432}",
                   "-h 127.0.0.1" if self.port is not None else "-h ''"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._run(["pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "60",
                   "-o", " ".join(options), "start"])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect clients; ``immediate``: crash-like)."""
        if self.initialised and self.running:
            self._run(["pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop"])

    def delete(self) -> None:
        """Stop the server and remove its data and log."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def _prepare_for_server_user(self) -> None:
        binaries()  # imports pgserver quietly first
        from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        ensure_user_exists(SERVER_USER)
        bin_dir = binaries()
        ensure_prefix_permissions(bin_dir)
        ensure_folder_permissions(bin_dir, 0o055)
        ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
        ensure_folder_permissions(bin_dir.parent / "share", 0o044)
        ensure_prefix_permissions(self.base_dir)
        # The server user owns its whole base directory: data, log and socket.
        for path in (self.base_dir, self.socket_dir, self.log_file):
            if path.exists():
                shutil.chown(path, SERVER_USER, SERVER_USER)

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        executable = str(binaries() / argv[0])
        # Output goes to a file, never a pipe: a pipe inherited by the server would
        # keep the call from returning.
        with tempfile.TemporaryFile("w+") as out:
            result = subprocess.run(
                [executable, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                user=SERVER_USER if self._as_root else None,
                cwd="/",
                check=False,
            )
            out.seek(0)
            output = out.read()
        if check and result.returncode != 0:
            tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}): {output.strip()}\n{tail}")
        return subprocess.CompletedProcess(argv, result.returncode, output, "")
