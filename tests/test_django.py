"""jobq.contrib.django: Django's tasks framework (the django-tasks backport on Django
5.2) on jobq, against the small project in tests/django_project on the test database.
A task's enqueue is a write on Django's own connection (it commits or rolls back with
``transaction.atomic()``); ``manage.py jobq_worker`` runs the tasks in real worker
processes, ``manage.py jobq_migrate`` migrates."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import jobq
from support.daemon import FAST
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.django]

PROJECT = Path(__file__).parent / "django_project"


@pytest.fixture(scope="session")
def django_setup(database_url):
    """Django set up in this test process for the project, on the test database."""
    os.environ["SHOP_DATABASE"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop.settings"
    sys.path.insert(0, str(PROJECT))
    import django

    django.setup()
    yield
    from django.db import connections

    connections.close_all()


@pytest.fixture
def shop(django_setup, conn):
    from django.db import connections

    from shop import tasks

    yield tasks
    connections.close_all()


def project_env(database_url: str) -> dict[str, str]:
    env = {**os.environ, **FAST, "SHOP_DATABASE": database_url, "PYTHONPATH": str(PROJECT)}
    for name in ("DATABASE_URL", "JOBQ_HANDLERS", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)  # the project's own: DATABASE_URL made from DATABASES, the runner added
    return env


def test_a_task_enqueued_in_atomic_commits_with_the_block_and_a_rollback_leaves_no_job(shop, conn):
    from django.db import transaction

    with transaction.atomic():
        kept = shop.add.enqueue(1, 2)
        assert jobq.list_jobs(conn=conn).total == 0  # Django's transaction is not committed yet
        assert shop.add.get_result(kept.id).status == "READY"  # but its own connection sees it
    job = jobq.get(int(kept.id), conn=conn)
    assert (job.type, job.payload["task"], job.payload["args"]) == ("django_task", "shop.tasks.add", [1, 2])

    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = shop.add.enqueue(3, 4)
        raise RuntimeError("the order failed")
    assert jobq.list_jobs(conn=conn).total == 1
    with pytest.raises(jobq.JobNotFound):
        jobq.get(int(dropped.id), conn=conn)


def test_queue_priority_and_run_after_become_the_jobs_and_bad_ones_are_refused(shop, conn):
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist

    from jobq.contrib.django.results import jobq_priority

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    receipt = shop.send_receipt.using(run_after=later).enqueue(7)
    job = jobq.get(int(receipt.id), conn=conn)
    assert (job.queue, job.priority, job.run_at, job.max_retries) == ("emails", jobq_priority(50), later, 0)
    assert [jobq_priority(p) for p in (-100, -1, 0, 1, 50, 100)] == [1, 5, 5, 5, 7, 10]
    assert jobq.get(int(shop.add.using(priority=-100).enqueue(1, 1).id), conn=conn).priority == 1
    with pytest.raises(InvalidTaskError):
        shop.add.using(queue_name="unknown").enqueue(1, 1)
    for missing in ("nope", "999999", str(job.id + 1000)):
        with pytest.raises(TaskResultDoesNotExist):
            shop.add.get_result(missing)
    plain = jobq.enqueue("not_a_task", conn=conn)
    with pytest.raises(TaskResultDoesNotExist):
        shop.add.get_result(str(plain.id))
    backend = shop.add.get_backend()
    assert (backend.supports_defer, backend.supports_priority, backend.supports_get_result) == (True, True, True)


def test_the_async_variants_go_through_jobq_aio(shop, conn):
    async def scenario():
        try:
            result = await shop.add.aenqueue(5, 6)
            return result, await shop.add.aget_result(result.id)
        finally:
            await jobq.aio.close()

    enqueued, read_back = asyncio.run(scenario())
    assert read_back.status == "READY" and read_back.args == [5, 6] and read_back.id == enqueued.id
    assert jobq.get(int(enqueued.id), conn=conn).payload["task"] == "shop.tasks.add"


@pytest.mark.chaos  # a real supervisor with its workers, stopped by a signal
def test_manage_py_jobq_worker_runs_the_tasks_and_get_result_reads_them(shop, conn, database_url, tmp_path):
    results = {
        "add": shop.add.enqueue(2, 3),
        "refuse": shop.refuse.enqueue("out of stock"),
        "context": shop.attempt_of.enqueue(),
        "async": shop.add_later.enqueue(1, 1),
        "receipt": shop.send_receipt.enqueue(9),
    }
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "jobq_worker", "--concurrency", "1"],
        cwd=PROJECT, env=project_env(database_url), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        def finished():
            read = {name: shop.add.get_backend().get_result(r.id) for name, r in results.items()}
            return read if all(r.is_finished for r in read.values()) else None

        read = wait_for(finished, 30, "every task finished")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(30) == 0
    dbname = conn.execute("SELECT current_database()").fetchone()[0]
    assert read["add"].status == "SUCCESSFUL" and read["add"].return_value == {"sum": 5, "database": dbname}
    assert read["context"].return_value == 1 and read["async"].return_value == 2
    assert read["receipt"].return_value == "receipt for order 9"  # its queue, from the backend's QUEUES
    failed = read["refuse"]
    assert failed.status == "FAILED" and failed.errors[0].exception_class_path == "builtins.ValueError"
    assert "out of stock" in failed.errors[0].traceback and failed.errors[0].exception_class is ValueError
    assert failed.finished_at is not None and len(failed.worker_ids) == 1


def test_manage_py_jobq_migrate_migrates_the_projects_database(empty_database):
    done = subprocess.run([sys.executable, "manage.py", "jobq_migrate"], cwd=PROJECT, env=project_env(empty_database),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "applied" in done.stdout and "schema at version" in done.stdout
    again = subprocess.run([sys.executable, "manage.py", "jobq_migrate"], cwd=PROJECT, env=project_env(empty_database),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "nothing to do" in again.stdout
