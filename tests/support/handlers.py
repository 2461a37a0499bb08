"""Job types for the daemon tests, loaded by workers through JOBQ_HANDLERS
(``support.handlers``: tests/ is on their PYTHONPATH, see support.daemon).

``ledger_*`` handlers insert (job id, lease, pid) into test_ledger after their work,
on a connection of their own, so a test can count how many times each job really
ran to completion.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import time
import uuid
import weakref

import psycopg

import jobq
from support import ledger as ledger_file

LEDGER_CREATE = (
    "CREATE TABLE IF NOT EXISTS test_ledger (run uuid PRIMARY KEY, "
    "job_id bigint NOT NULL, lease bigint, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
)
LEDGER_INSERT = "INSERT INTO test_ledger (run, job_id, lease, pid) VALUES (%s, %s, %s, %s) ON CONFLICT (run) DO NOTHING"

_conn: psycopg.Connection | None = None


def _record_run(insert: str, *columns: object) -> None:
    """A run's row in a ledger table, ``insert`` given the run's own id first, then
    ``columns``; written again while the database restarts: the ledger must not fail the
    run it records (an insert committed just before a crash, its answer lost, failed the
    handler, and the job's retry was a second run of a worker never killed). Sent again
    with the run's id, a committed row is stored once."""
    global _conn
    run, deadline = uuid.uuid4(), time.monotonic() + 60
    while True:
        try:
            if _conn is None or _conn.closed or _conn.broken:
                _conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, application_name="test ledger",
                                        connect_timeout=2)
            _conn.execute(insert, (run, *columns))
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _ledger(job: jobq.Job) -> dict:
    _record_run(LEDGER_INSERT, job.id, job.lease, os.getpid())
    return {"pid": os.getpid()}


@jobq.register("ledger")
def ledger(job: jobq.Job) -> dict:
    return _ledger(job)


@jobq.register("ledger_sleep")
def ledger_sleep(job: jobq.Job) -> dict:
    time.sleep(job.payload.get("seconds", 1))
    return _ledger(job)


@jobq.register("ledger_slow_first")
def ledger_slow_first(job: jobq.Job) -> dict:
    """Sleeps payload.seconds on its first attempt only: a run that a fault interrupts."""
    if job.attempt == 0:
        time.sleep(job.payload["seconds"])
    return _ledger(job)


@jobq.register("ledger_killed_first")
def ledger_killed_first(job: jobq.Job) -> dict:
    """On its first attempt, kills its own worker (SIGKILL) at once; then as ``ledger``."""
    if job.attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return _ledger(job)


@jobq.register("ledger_fail_first")
def ledger_fail_first(job: jobq.Job) -> dict:
    """On its first attempt, records its run and raises; then as ``ledger``."""
    if job.attempt == 0:
        _ledger(job)
        raise ValueError(f"planned failure of job {job.id}")
    return _ledger(job)


@jobq.register("ledger_burn")
def ledger_burn(job: jobq.Job) -> dict:
    """Holds the CPU in pure Python for payload.seconds."""
    deadline = time.monotonic() + job.payload["seconds"]
    n = 0
    while time.monotonic() < deadline:
        n = (n * 31 + 7) % 1_000_003
    return _ledger(job)


@jobq.register("hang", timeout=1)
def hang(job: jobq.Job) -> None:
    """Starts a child process (its pid goes to the ledger's lease column) and never returns."""
    child = subprocess.Popen(["sleep", "1000"])
    _record_run(LEDGER_INSERT, job.id, child.pid, os.getpid())
    time.sleep(10**6)


@jobq.register("exit_now")
def exit_now(job: jobq.Job) -> None:
    os._exit(1)


@jobq.register("segfault")
def segfault(job: jobq.Job) -> None:
    ctypes.string_at(0)


@jobq.register("leaky_fail")
def leaky_fail(job: jobq.Job) -> None:
    """Fails with its payload in the exception message, as careless handlers do."""
    raise RuntimeError(f"could not process {job.payload}")


@jobq.register("spin")
def spin(job: jobq.Job) -> dict:
    """A CPU-bound pure-Python loop that checks nothing, for payload.seconds (default: for ever)."""
    until = time.monotonic() + job.payload.get("seconds", 1e9)
    n = 0
    while time.monotonic() < until:
        n += 1
    return {"n": n}


@jobq.register("timed_burn")
def timed_burn(job: jobq.Job) -> dict:
    """Holds the CPU for payload.seconds without blocking; returns its process and when
    it ran (wall clock), for tests of who ran what at once."""
    started = time.time()
    until = time.monotonic() + job.payload["seconds"]
    while time.monotonic() < until:
        pass
    return {"pid": os.getpid(), "started": started, "ended": time.time()}


@jobq.register("timed_sleep")
def timed_sleep(job: jobq.Job) -> dict:
    """Waits payload.seconds (blocked, as on I/O); returns as timed_burn does."""
    started = time.time()
    time.sleep(job.payload["seconds"])
    return {"pid": os.getpid(), "started": started, "ended": time.time()}


@jobq.register("busy_in_c")
def busy_in_c(job: jobq.Job) -> int:
    """Hours inside one call to C code (the builtin sum over a range) that holds the
    interpreter and never checks for signals: Python cannot raise in it, nor another
    thread run. (The regex engine, by contrast, checks for signals as it backtracks.)"""
    return sum(range(10**13))


@jobq.register("cancel_cleanup")
def cancel_cleanup(job: jobq.Job) -> dict:
    """Sleeps until cancelled; records its cleanup in test_ledger (lease NULL) after
    payload.cleanup seconds (default 0), then re-raises, as a handler should."""
    try:
        time.sleep(job.payload.get("seconds", 60))
    except jobq.Cancelled:
        time.sleep(job.payload.get("cleanup", 0))
        job.lease = None
        _ledger(job)
        raise
    return {"slept": True}


@jobq.register("progress_steps")
def progress_steps(job: jobq.Job) -> dict:
    """Reports progress step by step while spinning the CPU between steps."""
    steps = job.payload.get("steps", 4)
    for step in range(1, steps + 1):
        until = time.monotonic() + job.payload.get("step_seconds", 0.5)
        while time.monotonic() < until:
            pass
        jobq.progress(step / steps, f"step {step} of {steps}", step=step)
    time.sleep(job.payload.get("linger", 0))
    return {"steps": steps}


@jobq.register("cancels_itself")
def cancels_itself(job: jobq.Job) -> None:
    raise jobq.Cancelled()


class Permanent(Exception):
    pass


class Transient(Exception):
    pass


@jobq.register("discard_permanent", max_retries=5, discard_on=(Permanent,), backoff=0.2)
def discard_permanent(job: jobq.Job) -> None:
    """Transient on its first run (retried after the handler's own 0.2 s), then permanent."""
    raise (Transient if job.attempt == 0 else Permanent)(f"order {job.id} failed")


@jobq.register("retry_only_transient", max_retries=5, retry_on=Transient, backoff=lambda attempt: 0.1 * (attempt + 1))
def retry_only_transient(job: jobq.Job) -> None:
    """Transient twice (retried after 0.1 s, then 0.2 s), then a ValueError: not retried."""
    if job.attempt < 2:
        raise Transient("try again")
    raise ValueError("bad input")


@jobq.register("bad_backoff", max_retries=1, backoff=lambda attempt: -1)
def bad_backoff(job: jobq.Job) -> None:
    raise Transient("its backoff gives no delay")


@jobq.register("snooze_twice")
def snooze_twice(job: jobq.Job) -> dict:
    """Snoozes for 0.1 s on its first two runs, then succeeds."""
    if job.snoozes < 2:
        raise jobq.Snooze(0.1)
    return {"snoozes": job.snoozes, "attempt": job.attempt}


@jobq.register("snooze_forever")
def snooze_forever(job: jobq.Job) -> None:
    raise jobq.Snooze(0)


@jobq.register("collector_state")
def collector_state(job: jobq.Job) -> dict:
    """The worker's garbage collector as its handlers see it, and whether a cycle this
    handler drops just after a pass over the youngest generation is collected once it
    has made ``allocations`` more objects."""
    class Node:
        pass

    gc.collect(0)
    node = Node()
    node.itself = node  # a cycle: only the collector frees it
    dropped = weakref.ref(node)
    del node
    kept = [[] for _ in range(job.payload["allocations"])]
    return {"first_threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count(),
            "cycle_collected": dropped() is None, "allocated": len(kept)}


# Workflow steps (tests/test_workflows.py): each writes the ledger, then returns what it
# read of its parents, so a test sees what flowed down.
@jobq.register("wf_step")
def wf_step(job: jobq.Job) -> dict:
    _ledger(job)
    return {"value": job.payload.get("value"), "parents": job.parent_results, "failures": job.parent_failures}


@jobq.register("wf_fail")
def wf_fail(job: jobq.Job) -> None:
    _ledger(job)
    raise RuntimeError(f"step {job.id} fails on purpose")


@jobq.register("wf_flaky")
def wf_flaky(job: jobq.Job) -> dict:
    """Fails its first attempt, succeeds on the next (good_job's retried-then-successful parent)."""
    _ledger(job)
    if job.attempt == 0:
        raise RuntimeError("first attempt fails")
    return {"value": job.payload.get("value"), "attempt": job.attempt}


@jobq.register("wf_sum")
def wf_sum(job: jobq.Job) -> dict:
    _ledger(job)
    return {"value": sum(r["value"] for r in (job.parent_results or {}).values()), "parents": len(job.parent_results or {})}


@jobq.register("wf_spawner")
def wf_spawner(job: jobq.Job) -> dict:
    """Spawns payload.n wf_step jobs (values 100, 101, ...); fails its first attempt after
    spawning when payload.fail_first (what it spawned then must never be written)."""
    names = [jobq.spawn("wf_step", {"value": 100 + i}) for i in range(job.payload.get("n", 2))]
    _ledger(job)
    if job.payload.get("fail_first") and job.attempt == 0:
        raise RuntimeError("fails after spawning")
    return {"value": 0, "spawned": names}


# The workflows' chaos test (tests/test_chaos_workflows.py): a ledger of each run's job,
# attempt and process, in a table of its own, one row a run (its own id).
WF_LEDGER_CREATE = (
    "CREATE TABLE IF NOT EXISTS wf_ledger (run uuid PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL, "
    "pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
)
WF_LEDGER_INSERT = "INSERT INTO wf_ledger (run, job_id, attempt, pid) VALUES (%s, %s, %s, %s) ON CONFLICT (run) DO NOTHING"


def _wf_ledger(job: jobq.Job) -> None:
    _record_run(WF_LEDGER_INSERT, job.id, job.attempt, os.getpid())


@jobq.register("wf_chaos_parent")
def wf_chaos_parent(job: jobq.Job) -> dict:
    time.sleep(0.002)
    _wf_ledger(job)
    return {"value": job.payload["i"]}


@jobq.register("wf_chaos_callback")
def wf_chaos_callback(job: jobq.Job) -> dict:
    jobq.spawn("wf_chaos_leaf")
    _wf_ledger(job)
    return {"parents": len(job.parent_results or {}), "sum": sum(r["value"] for r in (job.parent_results or {}).values())}


@jobq.register("wf_chaos_leaf")
def wf_chaos_leaf(job: jobq.Job) -> None:
    _wf_ledger(job)


@jobq.register("held")
def held(job: jobq.Job) -> dict:
    """Runs payload.seconds (default: for ever) in short sleeps, recording its start and
    its end in the file ledger (support.ledger): returned, or cancelled (jobq.Cancelled,
    re-raised as a handler should). The start is written inside the ``try``: a cancel's
    Cancelled may be raised at any line once the handler is entered, and a start written
    before it would then have no end."""
    how = "cancelled"
    try:
        ledger_file.write("start", job.id, job.attempt)
        until = time.monotonic() + job.payload.get("seconds", 1e9)
        while time.monotonic() < until:
            time.sleep(min(0.2, max(0.0, until - time.monotonic())))
        how = "returned"
        return {"host": os.environ.get("JOBQ_HOSTNAME")}
    finally:
        ledger_file.write("end", job.id, job.attempt, how)
SPANS_CREATE = (
    "CREATE TABLE IF NOT EXISTS test_spans (job_id bigint NOT NULL, lease bigint NOT NULL, queue text NOT NULL, "
    "concurrency_key text, attempt integer NOT NULL, pid integer NOT NULL, started timestamptz NOT NULL DEFAULT clock_timestamp(), "
    "ended timestamptz, PRIMARY KEY (job_id, lease))"
)


@jobq.register("span")
def span(job: jobq.Job) -> dict:
    """Records its run in test_spans: a row when it starts (after its claim committed) and
    its end after sleeping payload.seconds, or payload.linger more once cancelled (before
    its outcome is written), both on the
    database's clock, so that a test can count overlapping runs per queue and key."""
    global _conn
    if _conn is None or _conn.closed or _conn.broken:
        _conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, application_name="test ledger")
    _conn.execute(
        "INSERT INTO test_spans (job_id, lease, queue, concurrency_key, attempt, pid) VALUES (%s, %s, %s, %s, %s, %s)",
        (job.id, job.lease, job.queue, job.concurrency_key, job.attempt, os.getpid()),
    )
    try:
        time.sleep(job.payload.get("seconds", 0))
    except jobq.Cancelled:  # a cleanup of payload.linger seconds (within JOBQ_CANCEL_GRACE)
        time.sleep(job.payload.get("linger", 0))
        raise
    finally:  # a run stopped by jobq.Cancelled ends here too
        _conn.execute("UPDATE test_spans SET ended = clock_timestamp() WHERE job_id = %s AND lease = %s",
                      (job.id, job.lease))
    return {}
