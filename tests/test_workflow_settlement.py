"""How a parent's end reaches its children (migration 0021): the children's rows are
locked at the outcome's commit, in (workflow, name) order, so that two outcome batches
whose parents share several children never deadlock; a cancel cascades round by round
down a chain of any depth; a fan-in's parents record their outcomes side by side and
release their callback once."""

import threading
import time

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from support.db import scalar

pytestmark = [pytest.mark.db, pytest.mark.workflows]


def _claim(conn, n: int) -> dict:
    claimed = leases.claim(conn, ["default"], worker_id="test:1:w", limit=n, lock_base=0).result()
    assert len(claimed) == n
    conn.commit()
    return {claim.job_id: claim for claim in claimed}


def _complete_and_commit(conn, claims: list, errors: list) -> None:
    try:
        leases.complete(conn, claims, ['{"ok": true}'] * len(claims), [0.0] * len(claims), lock_base=0).result()
        conn.commit()
    except psycopg.Error as exc:  # a deadlock aborts one of the two: the test names it
        errors.append(exc)


def test_two_batches_whose_parents_share_children_in_opposite_orders_do_not_deadlock(conn):
    # Batch X finishes a then b, batch Y c then d (each batch in id order, as a worker's
    # outcome statement writes them). a's child is "z", b's are "m" and "y"; c's is "y"
    # and d's "z". Locking each row's children as the row is written (schema 15) takes z
    # then m, y in X and y then z in Y: with m held by a third session, X holds z and
    # waits for m, Y takes y and waits for z, and once m is let go X waits for y: a
    # deadlock, and PostgreSQL aborts one batch. Locked at commit in name order (m, y, z
    # and y, z), one batch simply waits for the other.
    wf = jobq.Workflow()
    a, b, c, d = (wf.add("wf_step", name=name) for name in "abcd")
    wf.add("wf_step", name="m", after=[b])
    wf.add("wf_step", name="y", after=[b, c])
    wf.add("wf_step", name="z", after=[a, d])
    run = wf.enqueue(conn=conn)
    with (psycopg.connect(conn.info.dsn) as x, psycopg.connect(conn.info.dsn) as y,
          psycopg.connect(conn.info.dsn) as holder):
        held = _claim(x, 4)
        holder.execute("SELECT FROM jobq_workflow_steps WHERE name = 'm' FOR UPDATE")
        errors: list[Exception] = []
        batches = [
            threading.Thread(target=_complete_and_commit, args=(
                session, [held[run.jobs[p].id] for p in parents], errors))
            for session, parents in ((x, (a, b)), (y, (c, d)))
        ]
        for batch in batches:
            batch.start()
            time.sleep(0.5)  # X has written its rows (and, row by row, would hold z) before Y starts
        holder.commit()
        for batch in batches:
            batch.join(30)
            assert not batch.is_alive()
    assert errors == []
    steps = jobq.get_workflow(run.id, conn=conn)
    assert {name: steps.jobs[name].status for name in "myz"} == dict.fromkeys("myz", "pending")
    assert scalar(conn, "SELECT sum(parents_left) FROM jobq_workflow_steps") == 0


def test_a_cancel_at_the_head_of_a_chain_of_5000_steps_reaches_its_end(conn):
    # Each cancelled step's end cancels the next one. Nested, trigger inside trigger, a
    # chain this deep passes PostgreSQL's max_stack_depth; applied round by round at the
    # commit, it does not.
    length = 5000
    run = jobq.chain(*[jobq.step("wf_step", name=f"s{i:04d}") for i in range(length)]).enqueue(conn=conn)
    head, last = run.jobs["s0000"], run.jobs[f"s{length - 1:04d}"]
    jobq.cancel(head.id, conn=conn)
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'cancelled'") == length
    assert jobq.get(last.id, conn=conn).error == f"parent step s{length - 2:04d} (job {last.id - 1}) ended cancelled"
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_edges WHERE outcome = 'cancelled'") == length - 1
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_tally") == 0


def test_a_fan_in_whose_parents_finish_in_concurrent_batches_is_released_once(conn):
    # Two sessions record 40 parents' outcomes, 20 each, in batches of 5 that interleave:
    # no batch waits on the callback's row while its statement runs (only at commit), and
    # the callback is released once, by whichever commit was last, with all 40 results.
    wf = jobq.Workflow()
    parents = [wf.add("wf_step", name=f"p{i:02d}") for i in range(40)]
    sink = wf.add("wf_step", name="sink", after=parents)
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as first, psycopg.connect(conn.info.dsn) as second:
        held = list(_claim(first, 40).values())
        errors: list[Exception] = []

        def record(session, claims):
            for i in range(0, len(claims), 5):
                _complete_and_commit(session, claims[i:i + 5], errors)

        writers = [threading.Thread(target=record, args=(session, held[k::2])) for k, session in enumerate((first, second))]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(30)
            assert not writer.is_alive()
    assert errors == []
    callback = jobq.get(run.jobs[sink].id, conn=conn)
    assert callback.status == "pending" and len(callback.parent_results) == 40
    assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'sink'") == 0
