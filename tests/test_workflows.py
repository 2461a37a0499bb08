"""Workflows against the real daemon and the real lease protocol: results flowing down a
chain and into a fan-in, on_parent_failure both ways, a retried-then-successful parent
(good_job's bug) releasing its callback once, a stale worker's late success releasing
nothing, two parents finishing at the same moment, cancel and retry of a workflow."""

import threading
import time
from dataclasses import replace

import psycopg
import pytest

import jobq
from jobq.errors import InvalidArgument, StepNotRetryable, WorkflowNotFound
from jobq.jobs import leases
from jobq.workflows.waiting import RECHECK, await_unfinished
from support.claims import LOCK_BASE
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.workflows]

DEADLINE = 30  # seconds: a generous protocol deadline for a small workflow on a loaded machine


def runs_of(conn, job_id: int) -> int:
    return scalar(conn, "SELECT count(*) FROM test_ledger WHERE job_id = %s", job_id)


def first_run_at(conn, job_id: int):
    return scalar(conn, "SELECT min(at) FROM test_ledger WHERE job_id = %s", job_id)


def test_a_chain_of_three_passes_results_down(ledger, daemon):
    wf = jobq.chain(jobq.step("wf_step", {"value": 1}, name="a"), jobq.step("wf_step", {"value": 2}, name="b"),
                    jobq.step("wf_step", {"value": 3}, name="c"))
    run = wf.enqueue(conn=ledger)
    assert [run.jobs[n].status for n in "abc"] == ["pending", "waiting", "waiting"]
    daemon(2)
    done = run.wait(timeout=DEADLINE, conn=ledger)
    assert done.status == "done"
    b, c = done.jobs["b"], done.jobs["c"]
    assert b.parent_results == {"a": {"value": 1, "parents": None, "failures": None}}
    assert c.result["parents"]["b"]["value"] == 2 and c.result["parents"]["b"]["parents"]["a"]["value"] == 1
    # Each step started only once its parent had finished.
    assert first_run_at(ledger, c.id) > first_run_at(ledger, b.id) > first_run_at(ledger, done.jobs["a"].id)
    assert all(runs_of(ledger, job.id) == 1 for job in done.jobs.values())


def test_a_group_of_ten_with_a_callback_that_receives_ten_results(ledger, daemon):
    wf = jobq.group(*[jobq.step("wf_step", {"value": i}) for i in range(10)], then=jobq.step("wf_sum", name="total"))
    run = wf.enqueue(conn=ledger)
    assert sorted(run.jobs) == sorted(["wf_step"] + [f"wf_step-{i}" for i in range(2, 11)] + ["total"])
    daemon(2)
    total = jobq.wait(run.jobs["total"].id, timeout=DEADLINE)
    assert total.result == {"value": sum(range(10)), "parents": 10}
    assert len(total.parent_results) == 10 and total.parent_failures is None
    assert runs_of(ledger, total.id) == 1


def test_a_failed_parent_cancels_its_dependents_and_their_descendants(ledger, daemon):
    wf = jobq.Workflow(name="fails")
    bad = wf.add("wf_fail", max_retries=0)
    child = wf.add("wf_step", after=[bad])
    grandchild = wf.add("wf_step", after=[child])
    run = wf.enqueue(conn=ledger)
    daemon(1)
    done = run.wait(timeout=DEADLINE, conn=ledger)
    assert done.status == "dead"
    assert done.jobs[bad].status == "dead"
    c, g = done.jobs[child], done.jobs[grandchild]
    assert (c.status, c.cancelled_by) == ("cancelled", "jobq")
    assert c.error == f"parent step wf_fail (job {run.jobs[bad].id}) ended dead"
    assert g.status == "cancelled" and g.error == f"parent step wf_step (job {c.id}) ended cancelled"
    assert runs_of(ledger, c.id) == 0 and runs_of(ledger, g.id) == 0


def test_on_parent_failure_run_releases_the_step_with_the_failure(ledger, daemon):
    wf = jobq.Workflow()
    good = wf.add("wf_step", {"value": 5})
    bad = wf.add("wf_fail", max_retries=0)
    last = wf.add("wf_step", after=[good, bad], on_parent_failure="run")
    run = wf.enqueue(conn=ledger)
    daemon(2)
    job = jobq.wait(run.jobs[last].id, timeout=DEADLINE)
    assert job.status == "done"
    assert job.parent_results == {good: {"value": 5, "parents": None, "failures": None}}
    assert list(job.parent_failures) == [bad] and "fails on purpose" in job.parent_failures[bad]


def test_a_retried_then_successful_parent_releases_its_callback_exactly_once(ledger, daemon):
    wf = jobq.group(*[jobq.step("wf_flaky", {"value": i}) for i in range(3)], then=jobq.step("wf_sum", name="cb"))
    run = wf.enqueue(conn=ledger)
    daemon(2)
    cb = jobq.wait(run.jobs["cb"].id, timeout=DEADLINE)
    assert cb.status == "done" and cb.result == {"value": 3, "parents": 3}
    assert runs_of(ledger, cb.id) == 1
    for name, job in run.jobs.items():
        if name != "cb":
            assert runs_of(ledger, job.id) == 2  # failed once, then succeeded
            assert jobq.get(job.id, conn=ledger).completed_at <= first_run_at(ledger, cb.id)


def _claim_all(conn, n: int) -> list:
    claimed = leases.claim(conn, ["default"], worker_id="test:1:w", limit=n, lock_base=0).result()
    assert len(claimed) == n
    return claimed


def test_a_stale_workers_late_success_releases_nothing(conn):
    wf = jobq.Workflow()
    parent = wf.add("wf_step")
    child = wf.add("wf_step", after=[parent])
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn, autocommit=True) as worker:
        (held,) = _claim_all(worker, 1)
    # The job is cancelled (a new lease) while the old run goes on; its late success is
    # a stale write, and the child is cancelled by the parent's end, not released.
    jobq.cancel(held.job_id, conn=conn)
    with psycopg.connect(conn.info.dsn, autocommit=True) as late:
        assert leases.complete(late, [held], ['{"late": true}'], [0.1], lock_base=0).result() == {held.job_id}
    step = jobq.get(run.jobs[child].id, conn=conn)
    assert step.status == "cancelled" and step.parent_results is None
    assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = %s", child) == 0


def test_two_parents_finishing_at_the_same_moment_release_the_step_once(conn):
    wf = jobq.Workflow()
    a = wf.add("wf_step", {"value": 1}, name="a")
    b = wf.add("wf_step", {"value": 2}, name="b")
    c = wf.add("wf_step", after=[a, b], name="c")
    run = wf.enqueue(conn=conn)
    with (psycopg.connect(conn.info.dsn) as first, psycopg.connect(conn.info.dsn) as second,
          psycopg.connect(conn.info.dsn) as holder):
        held = {claim.job_id: claim for claim in _claim_all(first, 2)}
        first.commit()
        leases.complete(first, [held[run.jobs[a].id]], ['{"value": 1}'], [0.0], lock_base=0).result()
        leases.complete(second, [held[run.jobs[b].id]], ['{"value": 2}'], [0.0], lock_base=0).result()
        # Both outcomes are written, neither committed: each counts its parent down at
        # its commit, under the step's row lock. Holding that lock here makes both
        # commits wait on it at once; let go, one decides after the other has committed
        # and sees it: c is released once, with both results.
        holder.execute("SELECT FROM jobq_workflow_steps WHERE name = 'c' FOR UPDATE")
        committers = [threading.Thread(target=session.commit) for session in (first, second)]
        for committer in committers:
            committer.start()
        time.sleep(0.5)
        assert all(committer.is_alive() for committer in committers)  # both blocked on the step's row lock
        assert scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == 2
        holder.commit()
        for committer in committers:
            committer.join(10)
            assert not committer.is_alive()
    assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'c'") == 0
    step = jobq.get(run.jobs[c].id, conn=conn)
    assert step.status == "pending" and step.parent_results == {"a": {"value": 1}, "b": {"value": 2}}


def test_cancel_and_retry_of_a_workflow(ledger, daemon):
    wf = jobq.Workflow(name="operated")
    first = wf.add("wf_step", {"value": 1}, name="first", run_at="2099-01-01T00:00:00Z")
    second = wf.add("wf_step", {"value": 2}, name="second", after=[first])
    third = wf.add("wf_step", name="third", after=[second], on_parent_failure="run")
    run = wf.enqueue(conn=ledger)
    cancelled = jobq.cancel_workflow(run.id, actor="tester", conn=ledger)
    assert cancelled.status == "cancelled"
    assert {name: job.status for name, job in cancelled.jobs.items()} == dict.fromkeys(
        (first, second, third), "cancelled")
    with pytest.raises(StepNotRetryable) as refused:
        jobq.retry(run.jobs[second].id, conn=ledger)
    assert f"retry_workflow({run.id})" in str(refused.value)

    ledger.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (run.jobs[first].id,))  # old row: no effect
    retried = jobq.retry_workflow(run.id, actor="tester", conn=ledger)
    new = retried.jobs
    assert all(new[n].id != run.jobs[n].id for n in (first, second, third))
    assert [new[n].status for n in (first, second, third)] == ["pending", "waiting", "waiting"]
    assert jobq.get(run.jobs[first].id, conn=ledger).retried_as == new[first].id
    daemon(2)
    done = retried.wait(timeout=DEADLINE, conn=ledger)
    assert done.status == "done" and done.jobs[third].parent_results[second]["value"] == 2
    actions = [a for (a,) in ledger.execute("SELECT action FROM jobq_audit ORDER BY id")]
    assert actions == ["cancel_workflow", "retry_workflow"]


def test_deleting_a_pending_step_cancels_its_dependents(conn):
    wf = jobq.Workflow()
    root = wf.add("wf_step", run_at="2099-01-01T00:00:00Z")
    child = wf.add("wf_step", after=[root])
    run = wf.enqueue(conn=conn)
    jobq.delete(run.jobs[root].id, conn=conn)
    step = jobq.get(run.jobs[child].id, conn=conn)
    assert step.status == "cancelled" and "ended deleted" in step.error


def test_a_waiting_step_can_be_cancelled_alone_and_counts_as_waiting(conn):
    wf = jobq.Workflow()
    root = wf.add("wf_step", run_at="2099-01-01T00:00:00Z")
    child = wf.add("wf_step", after=[root])
    run = wf.enqueue(conn=conn)
    assert jobq.counts(conn=conn).depth["waiting"] == 1
    assert [j.id for j in jobq.list_jobs(status="waiting", conn=conn).items] == [run.jobs[child].id]
    assert jobq.cancel(run.jobs[child].id, conn=conn).status == "cancelled"
    assert jobq.counts(conn=conn).depth["waiting"] == 0


def test_an_idempotent_submission_returns_the_first_run(conn):
    def make():
        wf = jobq.Workflow(name="once")
        wf.add("wf_step", after=[wf.add("wf_step")])
        return wf.enqueue(conn=conn, idempotency_key="order-17")

    one, two = make(), make()
    assert one.id == two.id and {n: j.id for n, j in one.jobs.items()} == {n: j.id for n, j in two.jobs.items()}
    assert scalar(conn, "SELECT count(*) FROM jobs") == 2


def test_wait_and_result_with_and_without_a_timeout(ledger, daemon):
    later = jobq.enqueue("ledger", run_at="2099-01-01T00:00:00Z", conn=ledger)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        jobq.wait(later.id, timeout=0.5)
    assert time.monotonic() - started < 5
    ok = jobq.enqueue("wf_step", {"value": 7}, conn=ledger)
    bad = jobq.enqueue("wf_fail", max_retries=0, conn=ledger)
    daemon(1)
    assert jobq.result(ok.id, timeout=DEADLINE)["value"] == 7
    with pytest.raises(jobq.JobFailed) as failed:
        jobq.result(bad.id)
    assert failed.value.status == "dead" and "fails on purpose" in failed.value.error
    assert jobq.wait(ok.id).status == "done"  # already finished: at once


def test_a_waiter_is_woken_by_the_notification_not_the_recheck(ledger):
    job = jobq.enqueue("ledger", conn=ledger)
    woke: list[float] = []

    def waiter() -> None:
        jobq.wait(job.id, timeout=DEADLINE)
        woke.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_for(lambda: scalar(ledger, "SELECT awaited FROM jobs WHERE id = %s", job.id), 10, "the waiter registered")
    finished = time.monotonic()
    jobq.cancel(job.id, conn=ledger)
    thread.join(DEADLINE)
    assert woke and woke[0] - finished < RECHECK / 2


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([{"name": "a", "type": "t", "after": ["b"]}, {"name": "b", "type": "t", "after": ["a"]}], "steps[b].after"),
        ([{"name": "a", "type": "t", "after": ["zzz"]}], "steps[a].after"),
        ([{"name": "a", "type": "t"}, {"name": "a", "type": "t"}], "steps[a].name"),
        ([{"name": "a", "type": "t", "colour": "red"}], "steps[a].colour"),
        ([{"name": "a", "type": "t", "on_parent_failure": "ignore"}], "steps[a].on_parent_failure"),
        ([{"name": f"s{i}", "type": "t"} for i in range(10_001)], "steps"),
    ],
)
def test_a_bad_workflow_is_refused_naming_the_step(steps, field):
    from jobq.workflows.definition import from_steps

    with pytest.raises(InvalidArgument) as refused:
        from_steps("bad", steps)
    assert refused.value.field == field


def test_an_unknown_workflow_is_not_found(conn):
    with pytest.raises(WorkflowNotFound):
        jobq.get_workflow(999, conn=conn)


def test_the_cli_lists_shows_cancels_and_retries_a_workflow(conn, database_url):
    from support.cli import run_cli

    wf = jobq.Workflow(name="from-cli")
    wf.add("wf_step", after=[wf.add("wf_step", name="root", run_at="2099-01-01T00:00:00Z")], name="leaf")
    run = wf.enqueue(conn=conn)
    env = {"DATABASE_URL": database_url}
    listed = run_cli("workflows", "list", "--json", **env)
    assert listed.returncode == 0, listed.stderr
    import json

    assert [(w["id"], w["status"], w["steps"]) for w in json.loads(listed.stdout)["workflows"]] == [
        (run.id, "running", 2)]
    shown = run_cli("workflows", "show", str(run.id), **env)
    assert shown.returncode == 0 and "leaf" in shown.stdout and "waiting" in shown.stdout and "root" in shown.stdout
    cancelled = run_cli("workflows", "cancel", str(run.id), **env)
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, f"jobq: workflow {run.id} cancelled")
    retried = run_cli("workflows", "retry", str(run.id), **env)
    assert (retried.returncode, retried.stdout.strip()) == (0, f"jobq: workflow {run.id} running")
    missing = run_cli("workflows", "show", "99999", **env)
    assert missing.returncode != 0 and missing.stderr.strip() == "jobq: workflow 99999 not found"
    bad = run_cli("workflows", "list", "--status", "sideways", **env)
    assert bad.returncode != 0 and "sideways" in bad.stderr


def test_spawned_jobs_join_the_workflow_once_and_the_dependents_wait_for_them(ledger, daemon):
    wf = jobq.Workflow()
    parent = wf.add("wf_spawner", {"n": 3, "fail_first": True}, name="fan")
    wf.add("wf_sum", after=[parent], name="total")
    run = wf.enqueue(conn=ledger)
    daemon(2)
    total = jobq.wait(run.jobs["total"].id, timeout=DEADLINE)
    assert total.status == "done"
    # The first run spawned and failed: nothing of it was written; the second's three were.
    assert set(total.parent_results) == {"fan", "fan.wf_step", "fan.wf_step-2", "fan.wf_step-3"}
    assert total.result == {"value": 100 + 101 + 102, "parents": 4}
    assert jobq.get(run.jobs["fan"].id, conn=ledger).result == {
        "value": 0, "spawned": ["wf_step", "wf_step-2", "wf_step-3"]}
    assert scalar(ledger, "SELECT count(*) FROM jobs WHERE type = 'wf_step'") == 3
    spawned = jobq.get_workflow(run.id, conn=ledger)
    assert {s.name: s.spawned_by for s in spawned.steps if s.spawned_by} == dict.fromkeys(
        ("fan.wf_step", "fan.wf_step-2", "fan.wf_step-3"), "fan")
    started = first_run_at(ledger, total.id)
    assert all(first_run_at(ledger, s.job.id) < started for s in spawned.steps if s.spawned_by)


def test_spawn_outside_a_workflow_step_is_refused():
    with pytest.raises(InvalidArgument):
        jobq.spawn("wf_step")


def test_retention_removes_a_workflow_with_its_last_job(conn):
    from jobq.store.retention import prune

    gone, kept = (jobq.Workflow(name=n) for n in ("gone", "kept"))
    for wf in (gone, kept):
        wf.add("wf_step", after=[wf.add("wf_step")])
    gone_run = gone.enqueue(conn=conn)
    kept.enqueue(conn=conn)
    conn.execute("UPDATE jobq_workflows SET created_at = now() - interval '2 hours'")
    # The jobs of one are gone (as a dropped partition takes them: no trigger fires).
    conn.execute("ALTER TABLE jobs DISABLE TRIGGER USER")
    try:
        conn.execute("DELETE FROM jobs WHERE workflow_id = %s", (gone_run.id,))
    finally:
        conn.execute("ALTER TABLE jobs ENABLE TRIGGER USER")
    prune(conn, 3600)
    assert [n for (n,) in conn.execute("SELECT name FROM jobq_workflows")] == ["kept"]
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_steps") == 2
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_edges") == 1


def test_marking_jobs_awaited_while_a_worker_finishes_them_never_fails_nor_deadlocks(conn, database_url):
    """A waiter marks 3,000 claimed jobs while another session finishes them 10 at a
    time, as a worker writes outcomes: one statement over all of them meets a row moved
    to the finished partition after its snapshot on nearly every try (a 1,002-step
    workflow's ``wait`` raised here), and a mark that waited for row locks deadlocked
    with the outcomes (the finisher's write was killed). The mark goes through, never
    kills a write, and every job unfinished after it is returned, and marked unless the
    mark said it skipped one."""

    jobq.enqueue_many([{"type": "t"}] * 3000, conn=conn)
    claimed = leases.claim(conn, ["default"], worker_id="w", limit=3000, lock_base=LOCK_BASE).result()
    ids = [c.job_id for c in claimed]
    unlocked = [replace(c, locked=False) for c in claimed]  # their locks are conn's: the finisher has none
    failed: list[BaseException] = []

    def finish() -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as own:
                for start in range(0, len(unlocked), 10):
                    batch = unlocked[start : start + 10]
                    leases.complete(own, batch, ["null"] * len(batch), [0.0] * len(batch), lock_base=LOCK_BASE).result()
        except BaseException as exc:  # noqa: BLE001  (asserted below)
            failed.append(exc)

    finisher = threading.Thread(target=finish)
    finisher.start()
    marks = 0
    try:
        while finisher.is_alive():
            unfinished, all_marked = await_unfinished(ids)
            marks += 1
            after = {row[0] for row in conn.execute(
                "SELECT id FROM jobs WHERE id = ANY(%s) AND status IN ('pending', 'claimed', 'running')", (ids,))}
            assert after <= set(unfinished)  # still unfinished after the mark: said so
            if all_marked:
                assert not scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'claimed' "
                                        "AND NOT awaited", ids)
    finally:
        finisher.join()
    assert failed == []
    assert marks >= 1 and await_unfinished(ids) == ([], True)


def test_a_waiters_mark_skips_a_row_an_outcome_holds_and_cannot_deadlock_with_it(conn, database_url):
    """A worker's outcome statement holds job B's row and goes on to write job A's; a
    waiter marks A and B meanwhile. A mark that waited for B while holding A closed the
    cycle (PostgreSQL then kills one of them: the worker's outcome write, or the
    waiter). The mark skips B, says so, and the outcome goes through."""

    jobq.enqueue_many([{"type": "t"}] * 2, conn=conn)
    a, b = sorted(leases.claim(conn, ["default"], worker_id="w", limit=2, lock_base=LOCK_BASE).result(),
                  key=lambda c: c.job_id)
    answer: list[object] = []
    with psycopg.connect(database_url) as worker:  # one transaction: B's outcome, then A's
        leases.complete(worker, [b], ["null"], [0.0], lock_base=LOCK_BASE).result()
        waiter = threading.Thread(target=lambda: answer.append(await_unfinished([a.job_id, b.job_id])))
        waiter.start()
        waiting_on_a_lock = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND pid <> pg_backend_pid() AND query LIKE '%%awaited%%'")
        wait_for(lambda: not waiter.is_alive() or scalar(conn, waiting_on_a_lock), 10, "the mark done, or waiting")
        leases.complete(worker, [a], ["null"], [0.0], lock_base=LOCK_BASE).result()
        worker.commit()
    waiter.join(10)
    assert answer == [([a.job_id, b.job_id], False)]  # both unfinished at its snapshot; B held, skipped
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'", [a.job_id, b.job_id]) == 2
