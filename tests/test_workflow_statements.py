"""A statement's finished steps are settled together (migration 0022): statement-level
triggers read the statement's transition tables, once per statement; a job outside any
workflow calls none of their functions; a batch that finishes every parent of a child
releases it for the claim in the same transaction; a child is owed one tally row per
statement, however many of its parents the statement finished; a savepoint rolled back
takes its tally rows and its round with it; the join of the two transition tables is never
a nested loop kept from a session's first, one-row call (migration 0024)."""

import time

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from support.db import rows_read, scalar
from support.waiting import wait_for
from jobq.store import statistics
from jobq.store.sql.workflows import WORKFLOW_RECOUNT_PARENTS, WORKFLOW_RETRY

pytestmark = [pytest.mark.db, pytest.mark.workflows]

WORKFLOW_FUNCTIONS = ("jobs_leaving_unfinished", "jobs_finished_after_update", "jobq_workflow_finished")


def _claim(conn, n: int, queue: str = "default") -> list:
    claimed = leases.claim(conn, [queue], worker_id="test:1:w", limit=n, lock_base=0).result()
    assert len(claimed) == n
    return claimed


def _complete(conn, claims: list) -> None:
    rejected = leases.complete(conn, claims, ['{"ok": true}'] * len(claims), [0.0] * len(claims), lock_base=0).result()
    assert rejected == set()


def _calls(conn) -> dict[str, int]:
    """Calls of each trigger function in this transaction so far (track_functions)."""
    return dict(conn.execute("SELECT funcname, calls FROM pg_stat_xact_user_functions").fetchall())


def test_a_job_outside_any_workflow_calls_no_workflow_function_on_its_outcome(conn):
    jobq.enqueue_many([{"type": "wf_step"}] * 5, conn=conn)
    wf = jobq.Workflow()
    wf.add("wf_step", name="child", after=[wf.add("wf_step", name="parent")])
    with psycopg.connect(conn.info.dsn) as session:
        session.execute("SET track_functions = 'all'")
        _complete(session, _claim(session, 5))
        calls = _calls(session)
        assert calls.get("jobs_counts_after_update", 0) >= 1  # the counters' trigger is seen: tracking works
        assert not set(WORKFLOW_FUNCTIONS) & set(calls)
        session.commit()
        wf.enqueue(conn=session)
        session.commit()
        _complete(session, _claim(session, 1))
        calls = _calls(session)
        assert {name: calls.get(name) for name in WORKFLOW_FUNCTIONS} == dict.fromkeys(WORKFLOW_FUNCTIONS, 1)
        session.commit()


def test_one_statement_finishing_every_parent_of_a_child_releases_it_for_the_same_transactions_claim(conn):
    wf = jobq.Workflow()
    parents = [wf.add("wf_step", name=f"p{i}") for i in range(3)]
    child = wf.add("wf_step", name="child", after=parents)
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as session:
        held = _claim(session, 3)
        session.commit()
        _complete(session, held)
        (claimed,) = _claim(session, 1)
        assert claimed.job_id == run.jobs[child].id
        assert scalar(session, "SELECT count(*) FROM jobq_workflow_tally") == 0
        session.commit()
    released = jobq.get(run.jobs[child].id, conn=conn)
    assert released.status == "claimed"
    assert released.parent_results == {p: {"ok": True} for p in parents}
    assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'child'") == 0


def test_a_statement_owes_a_fan_in_one_tally_row_however_many_parents_it_finished(conn):
    wf = jobq.Workflow()
    parents = [wf.add("wf_step", name=f"p{i}") for i in range(10)]
    wf.add("wf_step", name="sink", after=parents)
    wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as session:
        held = _claim(session, 10)
        session.commit()
        _complete(session, held[:6])
        assert session.execute("SELECT child, settled FROM jobq_workflow_tally").fetchall() == [("sink", 6)]
        assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'sink'") == 10
        session.commit()
        assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'sink'") == 4
        _complete(session, held[6:])
        session.commit()
    assert scalar(conn, "SELECT status FROM jobs JOIN jobq_workflow_steps ON job_id = id WHERE name = 'sink'") == "pending"
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_tally") == 0


def test_a_savepoint_rolled_back_takes_its_tally_rows_and_its_round_with_it(conn):
    # The round a transaction has open is a transaction-local setting: rolled back with
    # the savepoint, as the tally row and the deferred event are. Were it left on, the
    # second settlement would open no round: its row would never be applied, and the
    # child's count would stay at 2.
    wf = jobq.Workflow()
    a, b = wf.add("wf_step", name="a"), wf.add("wf_step", name="b")
    child = wf.add("wf_step", name="child", after=[a, b])
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as session:
        held = {claim.job_id: claim for claim in _claim(session, 2)}
        session.commit()
        first, second = held[run.jobs[a].id], held[run.jobs[b].id]
        session.execute("SAVEPOINT before")
        _complete(session, [first])
        assert scalar(session, "SELECT count(*) FROM jobq_workflow_tally") == 1
        session.execute("ROLLBACK TO SAVEPOINT before")
        assert scalar(session, "SELECT count(*) FROM jobq_workflow_tally") == 0
        _complete(session, [first])
        session.commit()
        assert scalar(conn, "SELECT parents_left FROM jobq_workflow_steps WHERE name = 'child'") == 1
        assert scalar(conn, "SELECT count(*) FROM jobq_workflow_tally") == 0
        _complete(session, [second])
        (claimed,) = _claim(session, 1)
        assert claimed.job_id == run.jobs[child].id
        session.commit()


def _settings(conn, function: str) -> list[str]:
    return scalar(conn, "SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = %s", function)


def test_the_transition_tables_are_never_joined_by_a_nested_loop_kept_from_a_one_row_first_call(conn):
    # PL/pgSQL keeps a query's plan for the session. A worker's first step outcome is
    # small (a root, a claim of 1 while its claim size grows), and a nested loop planned
    # for one row a side, kept for a batch of 500, read 250,000 tuplestore rows (50 ms a
    # batch). The trigger plans its join with no nested loop at all; the settlement it
    # calls, whose plans are index probes, turns nested loops back on for itself.
    assert "enable_nestloop=off" in _settings(conn, "jobs_finished_after_update")
    assert {"enable_nestloop=on", "enable_hashjoin=off", "enable_mergejoin=off"} <= set(
        _settings(conn, "jobq_workflow_finished")
    )
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root")
    middle = [wf.add("wf_step", name=f"m{i:03d}", after=[root]) for i in range(300)]
    sink = wf.add("wf_step", name="sink", after=middle)
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as session:
        _complete(session, _claim(session, 1))  # the session's first call: one row a side
        session.commit()
        held = _claim(session, 300)
        session.commit()
        _complete(session, held)  # the same session's plan, 300 rows a side
        (claimed,) = _claim(session, 1)
        assert claimed.job_id == run.jobs[sink].id
        session.commit()
    assert jobq.get(run.jobs[sink].id, conn=conn).parent_results == {m: {"ok": True} for m in middle}


def test_a_release_reads_each_step_a_bounded_number_of_times_whatever_the_statistics_say(conn):
    # Autovacuum may analyse the workflow tables while a large workflow's enqueue is not
    # committed yet: each is then believed empty though its pages are there. Schema 21's
    # release, planned from that, read every step of the workflow for each waiting row
    # it moved (a fan-out of 1,000: 508,064 step rows, 3 s; of 10,000: no end in ten
    # minutes). Schema 31's reads a handful per step.
    width = 1000
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root")
    for i in range(width):
        wf.add("wf_step", name=f"m{i:04d}", after=[root])
    with psycopg.connect(conn.info.dsn) as session, psycopg.connect(conn.info.dsn, autocommit=True) as analyser:
        wf.enqueue(conn=session)
        for table in ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges"):
            analyser.execute(f"ANALYZE {table}")  # sees none of the uncommitted rows
        session.commit()
        assert scalar(session, "SELECT reltuples FROM pg_class WHERE relname = 'jobq_workflow_steps'") == 0
        session.commit()
        _complete(session, _claim(session, 1))
        fetched = scalar(session, "SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables "
                                  "WHERE relname = 'jobq_workflow_steps'")
        session.commit()
    assert fetched <= 10 * width, fetched
    assert jobq.counts(conn=conn).depth["pending"] == width


@pytest.fixture
def workflow_tables_without_autovacuum(conn):
    """Autovacuum kept off the workflow tables for the test (it may analyse them at any
    moment after a commit, and did once in a CI run, leaving the leader nothing to do)."""
    tables = ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges")
    for table in tables:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    yield conn
    for table in tables:
        conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


def test_the_leader_analyses_workflow_tables_that_were_analysed_in_the_middle_of_an_enqueue(
    workflow_tables_without_autovacuum,
):
    # What the planner believes until autovacuum's next look (a minute later) after the
    # enqueue above: each table empty. The leader's duty (every few seconds) compares it
    # with the rows the statistics system counts live and analyses them again.
    conn = workflow_tables_without_autovacuum
    wf, _ = _fan_out(1500)
    with psycopg.connect(conn.info.dsn) as session, psycopg.connect(conn.info.dsn, autocommit=True) as analyser:
        wf.enqueue(conn=session)
        for table in ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges"):
            analyser.execute(f"ANALYZE {table}")  # sees none of the uncommitted rows
        session.execute("SELECT pg_stat_force_next_flush()")  # the commit's counts reach the statistics now
        session.commit()
    believed = "SELECT relname, reltuples FROM pg_class WHERE relname IN ('jobs_waiting', 'jobq_workflow_steps', 'jobq_workflow_edges')"
    assert {name: n for name, n in conn.execute(believed)} == dict.fromkeys(
        ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges"), 0)
    assert wait_for(lambda: statistics.analyse_workflows_if_stale(conn), 10, "the tables seen stale") == 3
    assert {name: n for name, n in conn.execute(believed)} == {
        "jobs_waiting": 1500, "jobq_workflow_steps": 1501, "jobq_workflow_edges": 1500}
    assert statistics.analyse_workflows_if_stale(conn) == 0  # once


def test_a_fan_outs_release_updates_its_edges_and_steps_in_place(conn):
    # Schema 32: the tables leave room on each page for their rows' updates, which are
    # then HOT (no index entry written); filled to the brim, about half were not.
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root")
    for i in range(300):
        wf.add("wf_step", name=f"m{i:03d}", after=[root])
    wf.enqueue(conn=conn)
    updates = ("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
               "WHERE relname IN ('jobq_workflow_edges', 'jobq_workflow_steps') ORDER BY relname")
    with psycopg.connect(conn.info.dsn) as session:
        (claimed,) = _claim(session, 1)
        session.commit()
        before = {name: (n, hot) for name, n, hot in session.execute(updates)}
        _complete(session, [claimed])
        after = {name: (n, hot) for name, n, hot in session.execute(updates)}
        session.commit()
    written = {name: (after[name][0] - before.get(name, (0, 0))[0], after[name][1] - before.get(name, (0, 0))[1])
               for name in after}
    assert written == {"jobq_workflow_edges": (300, 300), "jobq_workflow_steps": (300, 300)}, written


def test_cancelling_a_wide_workflow_settles_its_edges_by_probes(conn):
    # Cancelling 4,000 waiting steps settles their 4,000 edges to the callback in one
    # statement. Once the edges' statistics were taken with every edge settled (as
    # autovacuum takes them on a queue whose workflows finished), the planner guessed
    # that almost no edge is open, read the whole edges index as the outer side of a
    # nested loop and compared each edge with every cancelled step (PostgreSQL 16:
    # 32,004,000 pairs, 5.6 s). Schema 31 leaves the settlement and the tally only bitmap
    # probes by the statement's keys (80 ms). The deadline is 50 times that.
    assert {"enable_indexscan=off", "enable_bitmapscan=on", "enable_nestloop=on"} <= set(
        _settings(conn, "jobq_workflow_finished")
    )
    assert {"enable_indexscan=off", "enable_bitmapscan=on", "enable_seqscan=off"} <= set(
        _settings(conn, "jobq_workflow_tally_apply")
    )
    width = 4000
    jobq.cancel_workflow(_wide(conn, width).id, conn=conn)  # every edge of it settled
    conn.execute("ANALYZE jobq_workflow_edges")
    run = _wide(conn, width)
    started = time.monotonic()
    jobq.cancel_workflow(run.id, conn=conn)
    assert time.monotonic() - started < 4.0
    assert jobq.counts(conn=conn).depth["cancelled"] == 2 * (width + 2)


def _fan_out(width: int, prefix: str = "m") -> tuple[jobq.Workflow, list[str]]:
    """A workflow of a root and ``width`` steps after it (not enqueued), and their names."""
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root")
    return wf, [wf.add("wf_step", name=f"{prefix}{i:04d}", after=[root]) for i in range(width)]


def _wide(conn, width: int) -> jobq.WorkflowRun:
    """A root, ``width`` steps after it, and a sink after them all, enqueued."""
    wf, middle = _fan_out(width)
    wf.add("wf_step", name="sink", after=middle)
    return wf.enqueue(conn=conn)


def test_a_cancel_settles_each_edge_by_its_parent_after_a_sample_of_one_parents_edges(
    workflow_tables_without_autovacuum,
):
    # Schema 37. The edges analysed while they held one fan-out: every edge sampled is
    # from "root", and the statistics said the column holds one name. A probe by
    # workflow and parent looked no narrower than one by workflow alone, and the
    # settlement read the child index by its second column, the workflow: the whole
    # index for each cancelled step (4,001 x 8,000 edges, 2.5 s). The names' n_distinct
    # is set now, not sampled.
    conn = workflow_tables_without_autovacuum
    _fan_out(1500, prefix="f")[0].enqueue(conn=conn)
    conn.execute("ANALYZE jobq_workflow_edges")
    width = 2000
    run = _wide(conn, width)
    with conn.transaction():
        before = rows_read(conn, "jobq_workflow_edges")
        jobq.cancel_workflow(run.id, conn=conn)
        read = rows_read(conn, "jobq_workflow_edges") - before
    assert read <= 3 * 2 * width, read
    assert jobq.get(run.jobs["sink"].id, conn=conn).status == "cancelled"


def test_a_wide_workflow_is_read_a_job_at_a_time_though_its_jobs_partition_was_analysed_empty(
    migrated_database, database_url,
):
    # Analysed on a queue whose workflows had all finished, jobs_waiting is believed
    # empty until it is analysed again (the maintenance leader's duty, seconds later). A
    # workflow enqueued meanwhile was read with each step's job looked up by a whole scan
    # of jobs_waiting's id index where the partition's columns had never had statistics
    # (a database's first workflows: a run of 4,000 steps read in 0.7 s, and again for
    # its status; a cancel returns the run it read). Its jobs are read by their ids now,
    # one probe of each partition for all of them. A database of its own: no statistics
    # of an earlier test's (one where the role may not create databases: the run's own).
    with psycopg.connect(migrated_database or database_url, autocommit=True) as conn:
        for table in ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        try:
            width = 2000
            jobq.cancel_workflow(_wide(conn, width).id, conn=conn)
            conn.execute("ANALYZE jobs_waiting, jobq_workflow_steps, jobq_workflow_edges")
            assert scalar(conn, "SELECT reltuples FROM pg_class WHERE relname = 'jobs_waiting'") == 0
            run = _wide(conn, width)
            with conn.transaction():
                before = rows_read(conn, "jobs_waiting")
                read_back = jobq.get_workflow(run.id, conn=conn)
                read = rows_read(conn, "jobs_waiting") - before
        finally:
            for table in ("jobs_waiting", "jobq_workflow_steps", "jobq_workflow_edges"):
                conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    assert read <= 3 * (width + 2), read
    assert {step.name: step.job.status for step in read_back.steps} == {
        "root": "pending", "sink": "waiting", **{f"m{i:04d}": "waiting" for i in range(width)}}
    assert read_back.status == "running"


def _rows_compared(conn, statement: str, params: dict) -> int:
    """The rows ``statement`` discarded by a filter or a join filter, over every loop of
    every node of its plan (EXPLAIN ANALYZE, run and rolled back): the comparisons it
    made beyond the rows it kept."""
    with conn.transaction(force_rollback=True):
        (plan,) = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + statement, params).fetchone()[0]

    def walk(node: dict) -> int:
        removed = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Join Filter", 0)
        return removed * node.get("Actual Loops", 1) + sum(walk(child) for child in node.get("Plans", ()))

    return walk(plan["Plan"])


def test_retrying_a_wide_workflow_looks_its_retried_steps_up_by_name(conn):
    # A retry re-opens the edges between retried steps and recounts their children's
    # parents. It joined the edges with the retried steps' names as the planner guessed
    # their number (one): a retry of 2,000 steps compared 6,000,000 pairs of names (1 s),
    # and each step's new job was a scan of the array of them. The names are the keys of
    # one JSON object now, looked up by key.
    width = 2000
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root", max_retries=0)
    middle = [wf.add("wf_step", name=f"m{i:04d}", after=[root]) for i in range(width)]
    wf.add("wf_step", name="sink", after=middle)
    run = wf.enqueue(conn=conn)
    with psycopg.connect(conn.info.dsn) as session:
        (claimed,) = _claim(session, 1)
        leases.fail(session, [claimed], ["boom"], [0.0], [0.0], lock_base=0).result()  # dead: the rest cancelled
        session.commit()
    assert jobq.counts(conn=conn).depth["cancelled"] == width + 1
    with psycopg.connect(conn.info.dsn) as session:
        assert _rows_compared(session, WORKFLOW_RETRY, {"id": run.id}) <= 10 * width
        names = [root, *middle, "sink"]
        recount = {"id": run.id, "names": names, "new_ids": list(range(-len(names), 0))}
        assert _rows_compared(session, WORKFLOW_RECOUNT_PARENTS, recount) <= 10 * width
    retried = jobq.retry_workflow(run.id, conn=conn)
    assert jobq.get(retried.jobs[root].id, conn=conn).status == "pending"
    assert jobq.counts(conn=conn).depth["waiting"] == width + 1


def test_a_wide_workflow_among_many_small_ones_settles_each_edge_by_its_parent(conn):
    # Statistics taken over many small workflows (two steps each) say that a workflow
    # has a couple of edges: reading a finished step's edges by workflow then looks about
    # as cheap to the planner as reading them by workflow and parent. Schema 15's child
    # index, led by the workflow, served the first, with accurate statistics: every edge
    # of a wide workflow read again for each of its finished steps (cancelling 3,000
    # waiting steps read 18,006,000 edges, 1.3 s; a fan-in's batch of 500, 3,000,000).
    # Schema 35's child index is led by the child: a step's edges by parent are read
    # through the primary key alone.
    for i in range(300):
        small = jobq.Workflow()
        small.add("wf_step", name="b", after=[small.add("wf_step", name="a")])
        small.enqueue(conn=conn)
    conn.execute("ANALYZE jobs_waiting, jobq_workflow_steps, jobq_workflow_edges")
    width = 1000
    wf = jobq.Workflow()
    root = wf.add("wf_step", name="root", queue="wide")
    middle = [wf.add("wf_step", name=f"m{i:04d}", after=[root], queue="wide") for i in range(width)]
    wf.add("wf_step", name="sink", after=middle, queue="wide")
    run = wf.enqueue(conn=conn)
    edges = "jobq_workflow_edges"
    with psycopg.connect(conn.info.dsn) as session:
        _complete(session, _claim(session, 1, "wide"))  # the middle steps released
        session.commit()
        batch = _claim(session, 500, "wide")
        before = rows_read(session, edges)
        _complete(session, batch)  # a fan-in's batch: 500 edges to the sink settled
        fan_in = rows_read(session, edges) - before
        session.rollback()
        before = rows_read(session, edges)
        jobq.cancel_workflow(run.id, conn=session)  # 1,000 claimable steps and the waiting sink
        cancel = rows_read(session, edges) - before
        session.commit()
    assert fan_in <= 3 * len(batch), fan_in
    assert cancel <= 3 * width, cancel
    assert jobq.get(run.jobs["sink"].id, conn=conn).status == "cancelled"
