"""`jobq inspect` as terminal tables (rich)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from jobq.cli.limits import limits_table
from jobq.job import STATUSES
from jobq.observe.inspection import Snapshot


def render(snap: Snapshot) -> Group:
    return Group(
        _depth(snap),
        _workers(snap),
        _oldest(snap),
        *([_no_handler(snap)] if snap.no_handler else []),
        _failures(snap),
        _dead(snap),
        _locks(snap),
        *([limits_table(snap.limits, snap.queue_limits)] if snap.limits or snap.queue_limits else []),
    )


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _depth(snap: Snapshot) -> Table:
    table = _table("depth by queue and status", "queue", *STATUSES)
    for queue, depths in snap.queues.items():
        name = Text(f"{queue} (paused)", style="yellow") if queue in snap.paused_queues else queue
        table.add_row(name, *(str(depths[s]) for s in STATUSES))
    table.add_row(Text("all", style="bold"), *(Text(str(snap.depth[s]), style="bold") for s in STATUSES))
    return table


def _workers(snap: Snapshot) -> Table:
    table = _table(
        f"workers ({len(snap.workers)})", "worker", "queues", "running job", "progress", "jobs done", "heartbeat age"
    )
    for w in snap.workers:
        table.add_row(
            w.id, ",".join(w.queues), str(w.current_job_id or "-"), _progress(w.progress), str(w.jobs_done),
            f"{w.heartbeat_age_seconds:.1f} s",
        )
    return table


def _oldest(snap: Snapshot) -> Table:
    table = _table("oldest due pending job", "job", "type", "queue", "due since")
    if snap.oldest_pending:
        o = snap.oldest_pending
        table.add_row(str(o.id), o.type, o.queue, f"{o.age_seconds:.1f} s")
    return table


def _no_handler(snap: Snapshot) -> Table:
    table = _table("no handler (a typo?)", "type", "pending jobs")
    for job_type, n in snap.no_handler.items():
        table.add_row(Text(job_type, style="red"), str(n))
    return table


def _failures(snap: Snapshot) -> Table:
    table = _table("recent failures", "job", "type", "queue", "status", "attempt", "at", "error")
    for f in snap.recent_failures:
        table.add_row(str(f.id), f.type, f.queue, f.status, f"{f.attempt}/{f.max_retries}", f"{f.at:%H:%M:%S}", f.error[:120])
    return table


def _dead(snap: Snapshot) -> Table:
    table = _table(f"dead letters waiting ({snap.dead_letters_waiting})", "id", "job", "type", "queue", "attempts", "died", "error")
    for d in snap.dead_letters:
        table.add_row(str(d.id), str(d.original_id), d.type, d.queue, str(d.attempts), f"{d.died_at:%Y-%m-%d %H:%M:%S}", (d.error or "")[:120])
    return table


def _locks(snap: Snapshot) -> Table:
    table = _table(f"advisory locks held ({len(snap.advisory_locks)})", "holds", "pid", "session")
    for lock in snap.advisory_locks:
        table.add_row(lock.holds, str(lock.pid), lock.application_name or "")
    return table


def _progress(progress: dict | None) -> str:
    """``45 % step 2 of 4`` (either part may be missing), or ``-``."""
    if not progress:
        return "-"
    fraction = progress.get("fraction")
    parts = [f"{fraction * 100:.0f} %" if isinstance(fraction, (int, float)) else "", progress.get("message") or ""]
    return " ".join(part for part in parts if part) or "-"
