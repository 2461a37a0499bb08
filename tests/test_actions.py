"""Acting on one job: retry (a dead job's letter replayed, a cancelled job copied, once)
and run now, from the library, the API and the command line; each audited."""

from __future__ import annotations

import pytest

import jobq
from support.api import assert_error
from support.cli import run_cli
from support.rows import audit_actions, seed, seed_dead
from jobq.errors import AlreadyRetried, JobNotFound, JobNotRetryable, JobNotScheduled

pytestmark = [pytest.mark.control, pytest.mark.db]


def test_retrying_a_dead_job_replays_its_dead_letter_once(control):
    seed_dead(control, 1, tags=["t"])
    job_id, letter_id = control.execute("SELECT original_id, id FROM dead_letter_jobs").fetchone()
    new = jobq.retry(job_id, actor="me", conn=control)
    assert (new.status, new.type, new.payload, new.tags) == ("pending", "seeded", {"i": 1}, ["t"])
    assert jobq.get(job_id, conn=control).retried_as == new.id
    assert jobq.get_dead(letter_id, conn=control).replayed_as == new.id
    with pytest.raises(AlreadyRetried, match=f"retried as job {new.id}"):
        jobq.retry(job_id, conn=control)
    with pytest.raises(jobq.AlreadyReplayed):
        jobq.replay(letter_id, conn=control)
    assert audit_actions(control) == [("retry", {"id": job_id}, {"changed": 1, "retried_as": new.id})]


def test_a_dead_job_whose_letter_was_replayed_is_not_retried_again(control):
    seed_dead(control, 1)
    job_id, letter_id = control.execute("SELECT original_id, id FROM dead_letter_jobs").fetchone()
    replayed = jobq.replay(letter_id, conn=control)
    assert jobq.get(job_id, conn=control).retried_as == replayed.id  # the replay links the job too
    with pytest.raises(AlreadyRetried, match=f"retried as job {replayed.id}"):
        jobq.retry(job_id, conn=control)


def test_retrying_a_cancelled_job_enqueues_a_copy(control):
    original = jobq.enqueue("mail", {"to": "a"}, priority=8, max_retries=1, queue="q", tags=["x"], conn=control)
    jobq.cancel(original.id, conn=control)
    new = jobq.retry(original.id, conn=control)
    assert (new.type, new.payload, new.priority, new.max_retries, new.queue, new.tags, new.status) == (
        "mail", {"to": "a"}, 8, 1, "q", ["x"], "pending")


@pytest.mark.parametrize("status", ["pending", "running", "done"])
def test_only_dead_or_cancelled_jobs_can_be_retried(control, status):
    [job_id] = seed(control, 1, status)
    with pytest.raises(JobNotRetryable, match=f"is {status}"):
        jobq.retry(job_id, conn=control)
    with pytest.raises(JobNotFound):
        jobq.retry(job_id + 1, conn=control)
    assert audit_actions(control) == []


def test_run_now_makes_a_scheduled_job_due_and_refuses_one_already_due(control):
    [later] = seed(control, 1, "pending", type="later", delay=3600)
    [due] = seed(control, 1, "pending", type="due")
    job = jobq.run_now(later, conn=control)
    assert control.execute("SELECT run_at <= now() FROM jobs WHERE id = %s", (later,)).fetchone()[0]
    assert job.status == "pending"
    with pytest.raises(JobNotScheduled, match="already due"):
        jobq.run_now(due, conn=control)
    with pytest.raises(JobNotScheduled, match="already due"):
        jobq.run_now(later, conn=control)
    assert [action for action, _, _ in audit_actions(control)] == ["run_now"]


def test_the_routes_answer_with_the_new_job_or_a_409_naming_why(client, control):
    seed_dead(control, 1)
    [job_id] = [row[0] for row in control.execute("SELECT original_id FROM dead_letter_jobs")]
    retried = client.post(f"/jobs/{job_id}/retry")
    assert retried.status_code == 201 and retried.get_json()["status"] == "pending"
    new_id = retried.get_json()["id"]
    assert client.get(f"/jobs/{job_id}").get_json()["retried_as"] == new_id
    assert f"retried as job {new_id}" in assert_error(client.post(f"/jobs/{job_id}/retry"), 409)
    assert "only pending jobs scheduled" in assert_error(client.post(f"/jobs/{new_id}/run-now"), 409)
    [later] = seed(control, 1, "pending", type="later", delay=60)
    assert client.post(f"/jobs/{later}/run-now").status_code == 200
    assert_error(client.post("/jobs/999999/retry"), 404)
    assert_error(client.post("/jobs/999999/run-now"), 404)
    actors = {row[0] for row in control.execute("SELECT actor FROM jobq_audit")}
    assert actors == {"api:anonymous"}


def test_the_commands_print_one_line_and_exit_non_zero_on_refusal(control, database_url):
    [later] = seed(control, 1, "pending", type="later", delay=60)
    [pending] = seed(control, 1, "pending", type="p")
    ok = run_cli("run-now", str(later), DATABASE_URL=database_url)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"jobq: job {later} is due now")
    refused = run_cli("retry", str(pending), DATABASE_URL=database_url)
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"jobq: job {pending} is pending; only dead or cancelled jobs can be retried"
    assert run_cli("cancel", str(pending), DATABASE_URL=database_url).returncode == 0
    retried = run_cli("retry", str(pending), DATABASE_URL=database_url)
    assert retried.returncode == 0 and retried.stdout.startswith(f"jobq: job {pending} retried as job ")
    gone = run_cli("delete", "999999", DATABASE_URL=database_url)
    assert (gone.returncode, gone.stderr.strip()) == (1, "jobq: job 999999 not found")
    assert [action for action, _, _ in audit_actions(control)] == ["run_now", "cancel", "retry"]
    assert all(actor.startswith("cli:") for (actor,) in control.execute("SELECT actor FROM jobq_audit"))
