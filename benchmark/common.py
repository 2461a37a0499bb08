"""What the benchmarks share: a database to run against (a URL, or an embedded
PostgreSQL 16 started for the run with PostgreSQL's default settings), and reporting."""

from __future__ import annotations

import argparse

import contextlib
import json
import platform
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    """``url`` as given, or a fresh embedded server (default settings: fsync on) for the run,
    deleted afterwards (also when the run is stopped with TERM)."""
    if url:
        yield url
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="jobq-bench-") as base:
        server = EmbeddedPostgres(Path(base) / "pg", settings={"max_connections": "200"})
        server.start()
        try:
            yield server.url()
        finally:
            server.delete()


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The script's arguments, with the two every benchmark takes: --database-url (a
    server to use; else a throwaway embedded one) and --json (one JSON line of results)."""
    parser.add_argument("--database-url", help="a PostgreSQL to run against (default: a throwaway embedded one)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    return parser.parse_args()


@contextlib.contextmanager
def fresh_database(url: str | None) -> Iterator[str]:
    """:func:`database`, migrated, with the jobq tables empty."""
    with database(url) as url:
        migrated(url)
        reset(url)
        yield url


def migrated(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)


def reset(url: str) -> None:
    """Empty the jobq tables and reclaim their space; no queue paused or limited and no
    rule on keys left (a rule left by limits.py made every later drain on the database
    claim under limits)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, dead_letter_jobs, job_counters, jobq_queues, "
                     "jobq_limits, jobq_limit_slots, jobq_limit_starts RESTART IDENTITY")
        conn.execute("CHECKPOINT")


def percentiles(values: list[float], points: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
    if not values:
        return {f"p{int(p)}": float("nan") for p in points}
    ordered = sorted(values)
    cuts = statistics.quantiles(ordered, n=1000, method="inclusive") if len(ordered) > 1 else ordered * 999
    return {f"p{int(p) if p == int(p) else p}": cuts[int(p * 10) - 1] for p in points}


def timing(label: str, figures: dict[str, float]) -> str:
    """One line of a timing report: ``label median M ms, max X ms``."""
    return f"{label} median {figures['median_ms']} ms, max {figures['max_ms']} ms"


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the process's name (state, ppid, ...; utime and
    stime at 11 and 12, cutime and cstime at 13 and 14), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children_stat(pid: int) -> dict[int, list[str]]:
    """The live children of process ``pid``, each with its /proc stat fields (proc_stat)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(entry.name)
            if fields is not None and int(fields[1]) == pid:
                found[int(entry.name)] = fields
    return found


def environment() -> dict[str, str]:
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
    }


def emit(result: dict, as_json: bool) -> None:
    if as_json:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")


def save_figure(fig, path: Path) -> None:
    """Lay out a matplotlib figure and write it to ``path`` (its folder made if missing)."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
