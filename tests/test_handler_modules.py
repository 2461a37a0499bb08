"""JOBQ_HANDLERS modules are found as ``python -m`` finds them: from the directory the
worker starts in, with no PYTHONPATH, even through the ``jobq`` console script (whose
sys.path does not hold the current directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import jobq
from support.daemon import FAST
from support.waiting import wait_for

pytestmark = pytest.mark.daemon

JOBQ = str(Path(sys.executable).parent / "jobq")  # the console script, as a user runs it

HANDLER = '''
import jobq

@jobq.register("myapp_greet")
def greet(job):
    return {"greeting": "hello " + job.payload["name"]}
'''


def _worker(cwd: Path, database_url: str, handlers: str) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", **FAST, "DATABASE_URL": database_url, "JOBQ_CONCURRENCY": "1", "JOBQ_HANDLERS": handlers}
    env.pop("PYTHONPATH", None)
    return subprocess.Popen([JOBQ, "worker"], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def test_a_handler_module_in_the_current_directory_is_found_without_pythonpath(conn, database_url, tmp_path):
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(HANDLER)
    job = jobq.enqueue("myapp_greet", {"name": "newcomer"}, conn=conn)
    worker = _worker(tmp_path, database_url, "myapp.jobs")
    try:
        wait_for(lambda: jobq.get(job.id, conn=conn).status == "done", 30, "the job done by myapp.jobs")
        assert jobq.get(job.id, conn=conn).result == {"greeting": "hello newcomer"}
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.communicate(timeout=30)


def test_a_handler_module_not_found_names_the_module_and_the_directory_searched(database_url, tmp_path):
    worker = _worker(tmp_path, database_url, "myapp.jobs")
    _, err = worker.communicate(timeout=30)
    assert worker.returncode != 0
    assert f"no module named 'myapp' in the current directory ({tmp_path})" in err
