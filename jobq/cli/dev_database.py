"""Where ``jobq dev`` leaves the URL of the embedded PostgreSQL it started, so that the
other ``jobq`` commands run beside it (``jobq inspect`` in a second terminal) find it
without ``DATABASE_URL``.

``jobq dev`` writes the URL to ``<data dir>/database_url`` once the server is up and
removes it when it stops. A command with ``DATABASE_URL`` unset looks for
``.jobq/database_url`` in the current directory and its parents (as git looks for
``.git``) and uses it while that server is running; ``DATABASE_URL`` always wins.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(".jobq")  # jobq dev's default --data-dir, relative to the checkout
URL_FILE = "database_url"
SERVER_PID_FILE = Path("pg") / "data" / "postmaster.pid"  # EmbeddedPostgres(data_dir / "pg")


def publish(data_dir: Path, url: str) -> None:
    """Record ``url`` as the database of the ``jobq dev`` using ``data_dir``."""
    (data_dir / URL_FILE).write_text(url + "\n")


def withdraw(data_dir: Path) -> None:
    """Forget it (the server stopped)."""
    (data_dir / URL_FILE).unlink(missing_ok=True)


def find(start: Path) -> str | None:
    """The URL a running ``jobq dev`` published in ``start`` or a parent, else None."""
    for directory in (start, *start.parents):
        data_dir = directory / DATA_DIR
        url_file = data_dir / URL_FILE
        if url_file.is_file():
            return url_file.read_text().strip() if _server_running(data_dir) else None
    return None


def _server_running(data_dir: Path) -> bool:
    try:
        pid = int((data_dir / SERVER_PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False  # no pid file: the server is not running
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # it runs as another user (pgserver, when jobq dev ran as root)
    except OSError:
        return False  # its process is gone (a crash left the pid file)
    return True
