"""Running the real `jobq worker` as a subprocess for the daemon tests."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

import jobq
from support.db import scalar
from support.waiting import wait_for

TESTS_DIR = Path(__file__).resolve().parent.parent  # on the workers' PYTHONPATH: support.handlers

# Short protocol timings, so that the tests run in seconds.
FAST = {
    "JOBQ_POLL_INTERVAL": "2",
    "JOBQ_HEARTBEAT_INTERVAL": "0.3",
    "JOBQ_REAPER_INTERVAL": "0.3",
    "JOBQ_STALE_THRESHOLD": "1.5",
    "JOBQ_GRACEFUL_TIMEOUT": "5",
    "JOBQ_BACKOFF_BASE": "0.1",
    "JOBQ_HANDLERS": "support.handlers",
}


class Daemon:
    """A `jobq worker` process with its output in a file."""

    def __init__(self, url: str, log_path: Path, concurrency: int = 2, **env: str) -> None:
        self.url = url
        self.log_path = log_path
        self.env = {
            **os.environ,
            **FAST,
            "DATABASE_URL": url,
            "JOBQ_CONCURRENCY": str(concurrency),
            # A fixed pool: every worker from the start, whatever the machine's CPU count
            # (tests/test_pool.py sets its own to see the pool grow).
            "JOBQ_MIN_WORKERS": str(concurrency),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])),
            **env,
        }
        self.proc: subprocess.Popen | None = None

    def start(self, *args: str, prefix: tuple[str, ...] = ()) -> Daemon:
        """``prefix``: a command that runs it (``ip netns exec <host>``: it must exec, not fork)."""
        self.log_file = open(self.log_path, "ab")
        # From the log's folder: `python -m` puts its working directory first on
        # sys.path, and from the checkout that would run its jobq, not the one installed.
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "jobq", "worker", *args],
            cwd=self.log_path.parent,
            env=self.env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Leave nothing running: TERM, then KILL of the whole session."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in worker_pids_of_session(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=15)
        self.log_file.close()


def worker_pids_of_session(sid: int) -> list[int]:
    """Processes of a session (workers are in process groups of their own within it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid and int(entry.name) != sid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                pass
    return pids


def worker_pids(conn: psycopg.Connection) -> list[int]:
    return [pid for (pid,) in conn.execute("SELECT pid FROM workers ORDER BY started_at")]


def kill_a_worker(conn: psycopg.Connection) -> bool:
    """SIGKILL one worker process of those registered, chosen at random; whether one was."""
    pids = worker_pids(conn)
    if not pids:
        return False
    try:
        os.kill(random.choice(pids), signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped before or while /proc was read
        return False


def lines_naming(log: str, job_id: int) -> list[str]:
    """The lines of a daemon's log that name a job (``id=N``, or N in a list ``jobs=...,N``):
    what a test prints of a job whose story it must tell."""
    named = re.compile(rf"(id={job_id}\b|[=,]{job_id}(,|\s|$))")
    return [line for line in log.splitlines() if named.search(line)]


# The workers' listening connections (jobq.daemon.listener) in the test's database.
LISTENERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'jobq listener %%' AND datname = current_database()"
)


def assert_woken_by_notification(conn: psycopg.Connection) -> None:
    """A job enqueued now into an idle, listening worker starts within half a second of
    its creation: woken by its notification, not by the poll (FAST's is 2 s)."""
    time.sleep(0.3)
    job = jobq.enqueue("noop", conn=conn)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 5, "the next job done")
    latency = scalar(conn, "SELECT extract(epoch FROM started_at - created_at) FROM jobs WHERE id = %s", job.id)
    assert float(latency) < 0.5
