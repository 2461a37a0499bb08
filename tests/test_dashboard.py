"""The dashboard without a browser: its modes (full, readonly, off), hidden payloads,
the CSRF check, answers to bad input, and the library reads it shows (tallies, workers,
selected dead letters, charts)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

import jobq
from jobq.jobs import dead_letters
from jobq.jobs import ledger
from jobq.observe import tallies
from jobq.daemon import presence
from jobq.errors import ConfigError
from jobq.settings import Settings
from jobq.observe.workers import list_workers
from support.api import csrf_of
from support.rows import seed_dead
from web.dashboard import charts

pytestmark = [pytest.mark.dashboard, pytest.mark.db]

PAGES = ("/dashboard", "/dashboard/jobs", "/dashboard/queues", "/dashboard/limits", "/dashboard/workers", "/dashboard/schedules",
         "/dashboard/dead-letter")


def test_full_answers_every_page_and_redirects_the_root(make_app, conn):
    client = make_app().test_client()
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].endswith("/dashboard")
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, path
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]


def test_readonly_has_no_action_route_and_off_no_route_at_all(make_app, conn):
    readonly = make_app(dashboard="readonly")
    assert not [rule for rule in readonly.url_map.iter_rules() if rule.endpoint.startswith("dashboard_actions.")]
    client = readonly.test_client()
    for path in PAGES:
        page = client.get(path)
        assert page.status_code == 200 and b"read-only" in page.data.lower(), path
        assert b'method="post"' not in page.data, path
    assert client.post("/dashboard/queues/default/pause").status_code in (404, 405)
    off = make_app(dashboard="off").test_client()
    assert off.get("/").status_code == 404
    assert make_app(dashboard="off", api_token="t" * 32).test_client().get("/").status_code == 404
    assert off.get("/dashboard").status_code == 404
    assert off.get("/dashboard/static/dashboard.js").status_code == 404


def test_bad_dashboard_settings_stop_start_up_naming_the_variable():
    with pytest.raises(ConfigError, match="JOBQ_DASHBOARD"):
        Settings.from_env({"JOBQ_DASHBOARD": "sometimes"})
    with pytest.raises(ConfigError, match="JOBQ_DASHBOARD_HIDE_PAYLOADS"):
        Settings.from_env({"JOBQ_DASHBOARD_HIDE_PAYLOADS": "perhaps"})
    with pytest.raises(ConfigError, match="JOBQ_SECRET_KEY") as refused:
        Settings.from_env({"JOBQ_SECRET_KEY": "short-secret"})
    assert "short-secret" not in str(refused.value)  # a secret is never quoted


def test_hidden_payloads_are_shown_nowhere(make_app, conn):
    job = jobq.enqueue("echo", {"secret": "s3cr3t-payload"}, conn=conn)
    conn.execute("UPDATE jobs SET status = 'done', result = '{\"out\": \"s3cr3t-result\"}' WHERE id = %s", (job.id,))
    shown = make_app().test_client().get(f"/dashboard/jobs/{job.id}").data
    assert b"s3cr3t-payload" in shown and b"s3cr3t-result" in shown
    hidden = make_app(dashboard_hide_payloads=True).test_client()
    for path in (f"/dashboard/jobs/{job.id}", "/dashboard/jobs"):
        page = hidden.get(path).data
        assert b"s3cr3t" not in page, path


def test_a_post_needs_the_session_csrf_token_and_an_own_origin(make_app, conn):
    jobq.enqueue("noop", queue="mail", conn=conn)
    client = make_app().test_client()
    cookie = client.get("/dashboard/queues", headers={"X-Forwarded-Proto": "https"}).headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "Path=/dashboard" in cookie and "SameSite=Strict" in cookie
    client = make_app().test_client()
    assert client.post("/dashboard/queues/mail/pause", data={"reason": "x"}).status_code == 403
    csrf = csrf_of(client.get("/dashboard/queues").data)  # sets the anonymous session's cookie
    other = client.post("/dashboard/queues/mail/pause", data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert other.status_code == 403
    sandboxed = client.post("/dashboard/queues/mail/pause", data={"csrf": csrf}, headers={"Origin": "null"})
    assert sandboxed.status_code == 403
    assert client.post("/dashboard/queues/mail/pause", data={"csrf": "0" * 32}).status_code == 403
    assert conn.execute("SELECT count(*) FROM jobq_queues").fetchone()[0] == 0
    behind_tls_proxy = {"Origin": "https://localhost", "X-Forwarded-Proto": "https"}
    done = client.post("/dashboard/queues/mail/pause", data={"csrf": csrf, "reason": "incident"}, headers=behind_tls_proxy)
    assert done.status_code == 302
    assert conn.execute("SELECT paused_by, reason FROM jobq_queues").fetchone() == ("dashboard:anonymous", "incident")
    assert conn.execute("SELECT actor FROM jobq_audit WHERE action = 'pause'").fetchone()[0] == "dashboard:anonymous"


def test_bad_input_gets_a_page_saying_what_is_wrong_never_a_500(make_app, conn):
    client = make_app().test_client()
    page = client.get("/dashboard/jobs?ids=3,x&created_after=yesterday")
    assert page.status_code == 200 and b"ids" in page.data and b'role="alert"' in page.data
    assert client.get("/dashboard/jobs?created_after=yesterday").status_code == 200
    assert client.get("/dashboard/jobs/confirm?action=explode&all=1&status=dead").status_code == 400
    assert client.get("/dashboard/jobs/confirm?action=retry&all=1").status_code == 400  # an empty filter
    assert client.get("/dashboard/jobs/confirm?action=retry").status_code == 400  # nothing selected
    assert client.get("/dashboard/jobs/999").status_code == 404
    assert client.get("/dashboard/dead-letter/groups/nope").status_code == 404
    assert client.get("/dashboard/operations/5").status_code == 404
    assert client.get("/dashboard?window=7y").status_code == 200


def test_tallies_are_exact_from_the_counters_or_capped(conn):
    for i in range(7):
        jobq.enqueue("noop", {"i": i}, tags=["many"], queue="mail" if i % 2 else "default", conn=conn)
    jobq.enqueue("echo", tags=["few"], conn=conn)
    counted = tallies.by_status({"queue": "mail", "type": "noop", "status": "done"}, conn=conn)
    assert counted.exact and counted.total == 3 and counted.by_status["pending"] == 3
    few = tallies.by_status({"tag": "few"}, cap=5, conn=conn)
    assert few.exact and few.total == 1 and few.by_status["pending"] == 1
    many = tallies.by_status({"tag": "many"}, cap=5, conn=conn)
    assert (many.exact, many.total, many.by_status) == (False, 5, {})
    jobq.enqueue("noop", run_at=datetime.now(timezone.utc) + timedelta(hours=1), queue="mail", conn=conn)
    assert tallies.scheduled(["mail", "default"], cap=5, conn=conn) == {"mail": 1, "default": 0}


def test_a_capped_listing_counts_no_further_than_the_cap_even_for_the_seeds_criteria(conn, monkeypatch):
    monkeypatch.setattr(ledger, "COUNT_LIMIT", 4)
    for i in range(6):
        jobq.enqueue("noop", {"i": i}, conn=conn)
    exact = jobq.list_jobs(type="noop", limit=2, conn=conn)
    assert (exact.total, exact.total_exact, len(exact.items)) == (6, True, 2)
    capped = jobq.list_jobs(type="noop", limit=2, capped=True, conn=conn)
    assert (capped.total, capped.total_exact, [j.id for j in capped.items]) == (4, False, [6, 5])


def test_workers_are_listed_with_the_job_they_run(conn):
    presence.register(conn, "host-a:41:t", "host-a", 41, ["default"])
    job = jobq.enqueue("slow", conn=conn)
    conn.execute("UPDATE jobs SET status = 'running', started_at = now() - interval '5 s' WHERE id = %s", (job.id,))
    presence.beat(conn, "host-a:41:t", job.id, 12)
    (worker,) = list_workers(conn=conn)
    assert (worker.hostname, worker.pid, worker.current_job_id, worker.jobs_done, worker.job_type) == (
        "host-a", 41, job.id, 12, "slow")
    assert 4 < worker.job_running_seconds < 60 and worker.live(30)


def test_selected_dead_letters_are_replayed_or_discarded_with_an_audit_row(conn):
    seed_dead(conn, 3, type="charge", payload={}, error="E: x", attempt=0)
    ids = [row[0] for row in conn.execute("SELECT id FROM dead_letter_jobs ORDER BY id")]
    group_id = dead_letters.get(ids[0], conn=conn).group_id
    assert [letter.id for letter in dead_letters.letters_of_group(group_id, conn=conn)] == ids[::-1]
    replayed = dead_letters.replay_many(ids[:2], actor="dashboard:t", conn=conn)
    assert sorted(replayed) == ids[:2]
    assert dead_letters.discard_many(ids, actor="dashboard:t", conn=conn) == [ids[2]]
    assert dead_letters.group(group_id, conn=conn).count == 0
    audit = conn.execute("SELECT action, counts->>'changed' FROM jobq_audit ORDER BY id").fetchall()
    assert audit == [("dead_letter.replay", "2"), ("dead_letter.discard", "1")]


def test_charts_break_their_lines_where_minutes_have_no_data():
    start = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)
    points = [
        SimpleNamespace(minute=start + timedelta(minutes=i), completed=60 * i, failed=0, dead=0, cancelled=0,
                        pending=10, running=1, run_p50=None if i == 2 else 0.5, run_p95=1.0, run_p99=2.0,
                        latency_p50=0.1, latency_p95=0.2, latency_p99=0.3)
        for i in range(5)
    ]
    throughput, depth, run_time, _ = charts.charts_of(points)
    assert throughput.series["done"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    drawn = str(charts.svg(run_time))
    assert drawn.count("<polyline") == 4  # p50 in two pieces, p95, p99
    assert 'role="img"' in drawn and "09:00" in drawn and "09:04 UTC" in drawn
    assert "<polyline" in str(charts.svg(depth))


def test_a_schedule_is_run_paused_and_resumed_from_its_page(make_app, conn):
    from support.schedules import declare, spec

    declare(conn, spec("nightly"))
    client = make_app().test_client()
    csrf = csrf_of(client.get("/dashboard/schedules").data)
    run = client.post("/dashboard/schedules/nightly/run", data={"csrf": csrf})
    job_id = conn.execute("SELECT id FROM jobs WHERE schedule = 'nightly'").fetchone()[0]
    assert run.status_code == 302 and run.headers["Location"].endswith(f"/dashboard/jobs/{job_id}")
    assert client.post("/dashboard/schedules/nightly/pause", data={"csrf": csrf, "reason": "db move"}).status_code == 302
    assert conn.execute("SELECT paused_by, reason FROM jobq_schedules").fetchone() == ("dashboard:anonymous", "db move")
    assert b"paused" in client.get("/dashboard/schedules").data
    assert client.post("/dashboard/schedules/nightly/resume", data={"csrf": csrf}).status_code == 302
    assert conn.execute("SELECT paused_at FROM jobq_schedules").fetchone()[0] is None
    actions = [row[0] for row in conn.execute("SELECT action FROM jobq_audit ORDER BY id")]
    assert actions == ["schedule.run", "schedule.pause", "schedule.resume"]
    assert client.post("/dashboard/schedules/nope/run", data={"csrf": csrf}).status_code == 404


HOSTILE_GETS = [
    "/dashboard/jobs?queue=%00", "/dashboard/jobs?created_after=99999-01-01", "/dashboard/jobs?offset=" + "9" * 30,
    "/dashboard/jobs?ids=" + "9" * 30, "/dashboard/jobs?ids=" + ",".join(["1"] * 1001), "/dashboard/jobs?error=" + "e" * 2000,
    "/dashboard/jobs?tag=%ED%A0%80", "/dashboard/jobs/" + "9" * 30, "/dashboard/jobs/confirm?action=retry&selected=" + "9" * 30,
    "/dashboard/jobs/confirm?action=cancel&all=1&queue=%00", "/dashboard?queue=%00", "/dashboard?queue=" + "q" * 300,
    "/dashboard/dead-letter/groups/%00", "/dashboard/dead-letter/groups/0123456789abcdef/confirm?action=replay",
    "/dashboard/operations/" + "9" * 30, "/dashboard/login?next=//evil.example",
]
HOSTILE_POSTS = [
    ("/dashboard/queues/%00/pause", {}), ("/dashboard/queues/q/pause", {"reason": "r" * 5000}),
    ("/dashboard/schedules/%00/run", {}), ("/dashboard/schedules/a%00b/pause", {}),
    ("/dashboard/dead-letter/groups/%00/replay", {}), ("/dashboard/dead-letter/letters/replay", {"selected": ["9" * 30]}),
    ("/dashboard/dead-letter/letters/discard", {"selected": [str(i) for i in range(1, 1003)]}),
    ("/dashboard/jobs/bulk", {"action": "retry", "selected": ["9" * 30]}), ("/dashboard/jobs/bulk", {"action": "boom"}),
    ("/dashboard/jobs/bulk", {"action": "retry", "all": "1"}), ("/dashboard/jobs/" + "9" * 30 + "/cancel", {}),
    ("/dashboard/jobs/5/cancel", {}),
]


def test_hostile_input_gets_a_4xx_page_never_a_500(make_app, conn):
    client = make_app().test_client()
    for path in HOSTILE_GETS:
        response = client.get(path)
        assert response.status_code < 500, (path, response.status_code, response.data[:300])
    assert client.get("/dashboard/login?next=//evil.example").headers.get("Location", "").startswith("/dashboard")
    jobq.enqueue("noop", conn=conn)  # a queue, so that its page has a form
    csrf = csrf_of(client.get("/dashboard/queues").data)
    for path, form in HOSTILE_POSTS:
        response = client.post(path, data={"csrf": csrf, **form})
        assert 400 <= response.status_code < 500, (path, response.status_code, response.data[:300])
    assert conn.execute("SELECT count(*) FROM jobq_operations").fetchone()[0] == 0


def test_the_jobs_pages_go_older_by_cursor(make_app, conn):
    jobq.enqueue_many([{"type": "noop", "payload": {"i": i}} for i in range(60)], conn=conn)
    client = make_app().test_client()
    first = client.get("/dashboard/jobs?type=noop").data.decode()
    ids = [int(i) for i in re.findall(r'data-job="(\d+)"', first)]
    assert ids == list(range(60, 10, -1))
    older = re.search(r'href="([^"]+)" rel="next" id="older"', first).group(1).replace("&amp;", "&")
    assert "cursor=" in older and "type=noop" in older
    second = client.get(older).data.decode()
    assert [int(i) for i in re.findall(r'data-job="(\d+)"', second)] == list(range(10, 0, -1))
    assert 'id="older"' not in second and "Newest" in second
    broken = client.get("/dashboard/jobs?cursor=not-a-cursor").data.decode()
    assert 'role="alert"' in broken and len(re.findall(r'data-job="', broken)) == 50
