"""Does observing the queue stay cheap as history grows? Scrape and inspect times with a
million finished jobs in the table (and some of every other state).

    python benchmark/observe.py [--finished 1000000] [--scrapes 30] [--database-url URL] [--json]

Fills the table (synthetic finished jobs, plus pending, running and dead ones), lets
the maintenance leader take its counter samples, then times, over loopback:
``GET /metrics`` and ``GET /metrics/prometheus`` against Gunicorn as the Procfile
starts it, and ``jobq inspect --json`` (the whole command, interpreter start
included, and the snapshot it takes, alone); then each page of the dashboard (as its
live refresh fetches it: the whole page) against Gunicorn, and how many statements one
fetch sends (counted in process, through Flask's test client, on psycopg's cursors).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import psycopg

import jobq
import stack
from common import emit, environment, fresh_database, parse, timing
from jobq.jobs import cursors
from jobq.observe.inspection import snapshot
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE, Settings
from scale import fill_finished

# Besides the history: scheduled jobs, dead jobs and their dead letters.
FILL_OTHERS = (
    "INSERT INTO jobs (type, payload, run_at) "
    "SELECT 'noop', '{}', now() + interval '1 day' FROM generate_series(1, 10000); "
    "INSERT INTO jobs (type, payload, status, error, completed_at) "
    "SELECT 'always_fail', '{}', 'dead', 'RuntimeError: always', now() FROM generate_series(1, 1000); "
    "INSERT INTO dead_letter_jobs (original_id, type, queue, payload, priority, max_retries, error, attempts) "
    "SELECT id, type, queue, payload, priority, max_retries, error, 1 FROM jobs WHERE status = 'dead'"
)


# The dashboard's pages as its live refresh fetches them (the {group} is filled in).
DASHBOARD_PAGES = {
    "overview": "/dashboard",
    "overview 24h": "/dashboard?window=24h",
    "jobs": "/dashboard/jobs",
    "jobs done": "/dashboard/jobs?status=done",
    "jobs dead": "/dashboard/jobs?status=dead",
    "jobs type (1,000 rows)": "/dashboard/jobs?type=always_fail",
    "jobs type (1 M rows)": "/dashboard/jobs?type=noop",
    "jobs error text": "/dashboard/jobs?error=always",
    "jobs created range": "/dashboard/jobs?created_after=2000-01-01T00:00:00",
    "jobs 900,000 rows deep (cursor)": "/dashboard/jobs?cursor={deep}",
    "job": "/dashboard/jobs/1",
    "queues": "/dashboard/queues",
    "workers": "/dashboard/workers",
    "schedules": "/dashboard/schedules",
    "dead letters": "/dashboard/dead-letter",
    "dead-letter group": "/dashboard/dead-letter/groups/{group}",
    "confirm retry of all dead (dry run)": "/dashboard/jobs/confirm?action=retry&all=1&status=dead",
}


def dashboard_pages(url: str, conn: psycopg.Connection, fetches: int) -> dict[str, dict[str, float]]:
    """Each page's time over HTTP (median, max) and the statements one fetch sends."""
    group = conn.execute("SELECT id FROM jobq_dead_letter_groups ORDER BY count DESC LIMIT 1").fetchone()[0]
    rows = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    deep_row = conn.execute(
        "SELECT created_at, id FROM jobs ORDER BY created_at DESC, id DESC OFFSET %s LIMIT 1", (min(900_000, rows // 2),)
    ).fetchone()
    deep = urllib.parse.quote(cursors.encode(*deep_row))
    paths = {name: path.format(group=group, deep=deep) for name, path in DASHBOARD_PAGES.items()}
    found = {name: {"statements": count} for name, count in statements_per_page(url, paths).items()}
    with stack.gunicorn(url) as web:
        for name, path in paths.items():
            get(web + path)  # the process's pool, the session cookie's key
            found[name] = {**timed(lambda: get(web + path), fetches), **found[name]}
    return found


def statements_per_page(url: str, paths: dict[str, str]) -> dict[str, int]:
    """The statements one fetch of each page sends, counted on psycopg's cursors."""
    from web.app import create_app

    app = create_app(Settings.from_env({}, database_url=url))
    client = app.test_client()
    sent = 0
    execute = psycopg.Cursor.execute

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal sent
        sent += 1
        return execute(self, *args, **kwargs)

    counted = {}
    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        for name, path in paths.items():
            client.get(path)  # the first fetch reads the session key
            sent = 0
            assert client.get(path).status_code == 200, path
            counted[name] = sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    return counted


def timed(action, n: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(times[-1], 1)}


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parse(parser)

    with fresh_database(args.database_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            fill_finished(conn, args.finished)
            conn.execute(FILL_OTHERS)
            conn.execute("VACUUM ANALYZE jobs")
            rows = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        with stack.workers(url, 1, env={"JOBQ_LOG_LEVEL": "WARNING"}), stack.gunicorn(url) as api:
            time.sleep(6)  # a couple of counter samples by the maintenance leader
            get(api + "/metrics")
            scrape_json = timed(lambda: get(api + "/metrics"), args.scrapes)
            scrape_prometheus = timed(lambda: get(api + "/metrics/prometheus"), args.scrapes)
        env = {**os.environ, "DATABASE_URL": url}
        command = timed(
            lambda: subprocess.run([sys.executable, "-m", "jobq", "inspect", "--json"], env=env, check=True,
                                   capture_output=True),
            5,
        )
        with psycopg.connect(url, autocommit=True) as conn:
            inspect_query = timed(lambda: snapshot(conn, namespace=DEFAULT_ADVISORY_NAMESPACE), args.scrapes)
            depth = jobq.counts(conn=conn).depth
            pages = dashboard_pages(url, conn, args.scrapes)
    result = {
        **environment(),
        "rows": rows,
        "depth": depth,
        "metrics_json": scrape_json,
        "metrics_prometheus": scrape_prometheus,
        "inspect_command": command,
        "inspect_snapshot": inspect_query,
        "dashboard": pages,
    }
    if args.json:
        emit(result, True)
    else:
        print(f"table: {rows:,} jobs {depth}")
        print(timing("GET /metrics            ", scrape_json))
        print(timing("GET /metrics/prometheus ", scrape_prometheus))
        print(f"jobq inspect --json      median {command['median_ms']} ms (the whole command), "
              f"snapshot alone {inspect_query['median_ms']} ms")
        for name, figures in pages.items():
            print(timing(f"dashboard {name:38}", figures) + ", "
                  f"{figures['statements']:g} statements")


if __name__ == "__main__":
    main()
