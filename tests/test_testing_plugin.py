"""jobq.testing, the pytest plugin for users: a user's handler module and its tests, in
a directory of their own outside this repository, run by a pytest of their own with
jobq installed as a user has it. The fixtures jobq_database and jobq_drain, the helpers
assert_enqueued and enqueued_jobs; and the plugin, loaded in every pytest run, imports
nothing of jobq until a fixture is used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.db, pytest.mark.plugin]

HANDLERS = '''
import asyncio

import jobq


@jobq.register("resize")
def resize(job):
    jobq.enqueue("notify", {"image": job.payload["image"]})
    return {"width": job.payload["width"] // 2}


@jobq.register("notify")
async def notify(job):
    await asyncio.sleep(0)
    return "sent"


@jobq.register("flaky", max_retries=1, backoff=0)
def flaky(job):
    raise RuntimeError("boom")
'''

TESTS = '''
import pytest

import jobq
from jobq.testing import assert_enqueued, enqueued_jobs

import handlers  # noqa: F401  (registers the job types)


def test_a_resize_runs_and_enqueues_its_notification(jobq_database, jobq_drain):
    job = jobq.enqueue("resize", {"image": "a.png", "width": 640})
    assert_enqueued(type="resize", payload={"image": "a.png", "width": 640}, queue="default")
    ran = jobq_drain()
    assert [(r.job.type, r.status, r.result) for r in ran] == [
        ("resize", "done", {"width": 320}), ("notify", "done", "sent")]
    assert jobq.get(job.id).status == "done"
    assert_enqueued(type="notify", payload={"image": "a.png"}, count=1)


def test_a_failing_handler_is_retried_then_dead_lettered(jobq_database, jobq_drain):
    jobq.enqueue("flaky")
    ran = jobq_drain()
    assert [r.status for r in ran] == ["pending", "dead"]
    assert "RuntimeError: boom" in ran[-1].error


def test_each_test_has_a_database_of_its_own(jobq_database):
    assert enqueued_jobs() == []


def test_assert_enqueued_says_what_was_enqueued_instead(jobq_database):
    jobq.enqueue("resize", {"image": "b.png", "width": 2})
    with pytest.raises(AssertionError, match="b.png"):
        assert_enqueued(type="notify")
'''

LIGHT = '''
import sys


def test_the_plugin_is_loaded_and_imported_nothing_of_jobq():
    assert "pytest_jobq" in sys.modules
    assert not [name for name in sys.modules if name == "jobq" or name.startswith(("jobq.", "testcontainers", "pgserver"))]
'''


def user_project(root: Path, **files: str) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def run_pytest(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A user's pytest in their project's directory (none of this repository's conftest,
    nor its tests/ on the path)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTHONPATH", "JOBQ_TEST_DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(project / "tmp")],
        cwd=project, env={**clean, **env}, capture_output=True, text=True, timeout=300,
    )


def test_a_users_handlers_are_tested_with_the_fixtures_on_a_given_server(server_url, tmp_path):
    project = user_project(tmp_path / "shop", **{"handlers.py": HANDLERS, "test_handlers.py": TESTS})
    done = run_pytest(project, {"JOBQ_TEST_DATABASE_URL": server_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_without_a_server_given_the_fixtures_start_the_embedded_one(tmp_path):
    project = user_project(tmp_path / "shop", **{"handlers.py": HANDLERS, "test_handlers.py": TESTS})
    done = run_pytest(project, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_the_plugin_imports_nothing_of_jobq_until_a_fixture_is_used(tmp_path):
    project = user_project(tmp_path / "light", **{"test_light.py": LIGHT})
    done = run_pytest(project, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
