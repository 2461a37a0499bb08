"""Retry policy per handler (backoff, retry_on, discard_on): on the registry alone, and
applied by the real daemon to the exceptions a handler raises."""

import pytest

import jobq
from support.waiting import wait_for
from jobq.handlers.registry import Handler

pytestmark = [pytest.mark.retry]


class Boom(Exception):
    pass


def dead(conn, job_id: int) -> jobq.Job | None:
    job = jobq.get(job_id, conn=conn)
    return job if job.status == "dead" else None


def run_until_dead(ledger, daemon, job_type: str, what: str) -> jobq.Job:
    """A job of ``job_type`` (5 retries allowed) run by one worker until it is dead."""
    job = jobq.enqueue(job_type, max_retries=5, conn=ledger)
    daemon(1)
    return wait_for(lambda: dead(ledger, job.id), 20, what)


@pytest.mark.unit
def test_register_refuses_a_bad_policy_naming_it():
    for kwargs, field in (
        ({"backoff": -1}, "backoff"), ({"backoff": float("inf")}, "backoff"), ({"backoff": True}, "backoff"),
        ({"retry_on": ValueError()}, "retry_on"), ({"discard_on": (ValueError, "x")}, "discard_on"),
    ):
        with pytest.raises(jobq.InvalidArgument) as refused:
            jobq.register("policy_check", **kwargs)
        assert refused.value.field == field


@pytest.mark.unit
def test_a_handler_says_which_exceptions_are_not_retried_and_how_long_to_wait():
    handler = Handler("h", print, retry_on=(OSError,), discard_on=(FileNotFoundError,), backoff=lambda a: 2**a)
    assert handler.not_retried(TimeoutError()) is None  # an OSError: retried
    assert "discard_on" in handler.not_retried(FileNotFoundError())  # an OSError, but discarded
    assert "retry_on" in handler.not_retried(Boom())
    assert [handler.retry_delay(a) for a in (0, 3)] == [1.0, 8.0]
    assert Handler("h", print).retry_delay(0) is None  # the global policy
    assert Handler("h", print, backoff=lambda a: "soon").retry_delay(0) is None
    assert Handler("h", print, backoff=lambda a: 1 / 0).retry_delay(0) is None


@pytest.mark.db
@pytest.mark.daemon
def test_an_exception_in_discard_on_goes_to_the_dead_letters_without_its_retries(ledger, daemon):
    done = run_until_dead(ledger, daemon, "discard_permanent", "the job dead on its permanent error")
    assert done.attempt == 1 and len(done.errors) == 2  # one retry (the transient error), not five
    first, second = done.errors
    assert "Transient" in first["error"] and "not retried" not in first["error"]
    assert second["error"].startswith("not retried: Permanent is in discard_on of 'discard_permanent'")
    letter = ledger.execute("SELECT error, attempts FROM dead_letter_jobs WHERE original_id = %s", (done.id,)).fetchone()
    assert letter[0].startswith("not retried:") and letter[1] == 2
    # the handler's own backoff (0.2 s), not the global 5 s, separated the two runs
    gap = ledger.execute(
        "SELECT extract(epoch FROM (errors->1->>'at')::timestamptz - (errors->0->>'at')::timestamptz) FROM jobs WHERE id = %s",
        (done.id,),
    ).fetchone()[0]
    assert 0.2 <= gap < 3


@pytest.mark.db
@pytest.mark.daemon
def test_retry_on_retries_only_those_exceptions_with_the_handlers_backoff(ledger, daemon):
    done = run_until_dead(ledger, daemon, "retry_only_transient", "the job dead on the exception retry_on leaves out")
    assert done.attempt == 2 and [("Transient" in e["error"]) for e in done.errors] == [True, True, False]
    assert done.errors[2]["error"].startswith("not retried: ValueError is not in retry_on")
    assert jobq.counts(conn=ledger).totals["failed_runs_total"] == 3


@pytest.mark.db
@pytest.mark.daemon
def test_a_backoff_that_gives_no_delay_falls_back_to_the_global_policy(ledger, daemon):
    job = jobq.enqueue("bad_backoff", max_retries=1, conn=ledger)
    d = daemon(1, JOBQ_BACKOFF_BASE="0.1")
    wait_for(lambda: dead(ledger, job.id), 20, "the job dead after its one retry")
    assert "job.backoff_failed" in d.log()
