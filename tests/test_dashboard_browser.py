"""The dashboard in a real browser (headless Chromium through Selenium) against a real
Gunicorn and a real `jobq worker` on the test database: every page opens without a
console error (and is photographed, wide and phone-sized), the jobs filter shows the
right rows, "all matching" retries 2,000 dead jobs through its confirmation, a queue's
pause button stops its claims, a running job is cancelled from its page, a job enqueued
meanwhile appears and reaches done without a reload, and the login guards it all when
a token is set."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator

import psycopg
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

import jobq
from jobq.jobs import queues
from support.browser import Browser, PHONE, screenshot_dir
from support.db import scalar
from support.rows import per_row, seed_dead
from support.schedules import VARIABLE as SCHEDULES_VARIABLE, entry
from support.waiting import wait_for
from support.web_server import WebServer

pytestmark = [pytest.mark.dashboard, pytest.mark.db]

TOKEN = "dashboard-test-token-0123456789"
HANDLERS = "support.handlers,support.schedules"
PAGES = {
    "overview": "/dashboard",
    "jobs": "/dashboard/jobs",
    "queues": "/dashboard/queues",
    "workers": "/dashboard/workers",
    "schedules": "/dashboard/schedules",
    "dead-letter": "/dashboard/dead-letter",
    "audit": "/dashboard/audit",
}


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    web = WebServer(database_url, tmp_path_factory.mktemp("dashboard-web")).start()
    yield web
    web.stop()


@pytest.fixture(scope="module")
def browser(server: WebServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    opened = Browser(f"http://127.0.0.1:{server.port}", screenshot_dir(tmp_path_factory.mktemp("screenshots")))
    yield opened
    opened.quit()


@pytest.fixture
def page(browser: Browser, conn: psycopg.Connection) -> Browser:
    """The browser, on empty tables, its console read empty."""
    browser.open("/dashboard")
    browser.script("window.localStorage.clear()")
    browser.console_errors()
    return browser


def fill_dead(conn: psycopg.Connection, n: int, error: str = "RuntimeError: card 4017 declined") -> None:
    seed_dead(conn, n, type="charge", payload=per_row("jsonb_build_object('order', i)"), error=error, attempt=0,
              errors=per_row("jsonb_build_array(jsonb_build_object('attempt', 0, 'error', {}::text, 'at', now()))", error))


def fill_minutes(conn: psycopg.Connection) -> None:
    """An hour of made-up rollup rows (jobq.observe.rollup's own tests check the real ones), so
    that the overview's charts have lines to draw."""
    conn.execute(
        "INSERT INTO jobq_minutes SELECT date_trunc('minute', now()) - make_interval(mins => m), q, "
        "300 + 200 * sin(m / 6.0) + m, 4 + m % 5, m % 3, m % 2, 500 + 40 * m, 2 + m % 3, "
        "0.2 + 0.05 * cos(m / 5.0), 0.9 + 0.2 * sin(m / 7.0), 1.6 + 0.3 * sin(m / 9.0), "
        "0.05, 0.4 + 0.1 * sin(m / 4.0), 1.1 + 0.4 * cos(m / 8.0) "
        "FROM generate_series(1, 60) AS m, unnest(ARRAY['', 'default']) AS q "
        "ON CONFLICT (queue, minute) DO UPDATE SET completed = excluded.completed, failed = excluded.failed, "
        "pending = excluded.pending, running = excluded.running, run_p50 = excluded.run_p50, "
        "run_p95 = excluded.run_p95, run_p99 = excluded.run_p99, latency_p50 = excluded.latency_p50, "
        "latency_p95 = excluded.latency_p95, latency_p99 = excluded.latency_p99"
    )


def test_every_page_opens_without_a_console_error_wide_and_on_a_phone(page: Browser, conn, daemon):
    daemon(2, JOBQ_HANDLERS=HANDLERS, **{SCHEDULES_VARIABLE: entry("nightly_report", "0 3 * * *") + ";"
                                          + entry("every_minute", "* * * * *")})
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobq_schedules") == 2, 30, "the schedules declared")
    fill_dead(conn, 3)
    slow = jobq.enqueue("slow", {"sleep_seconds": 30}, tags=["import:88"], conn=conn)
    later = jobq.enqueue("noop", {"n": 1}, queue="mail", run_at="2099-01-01T00:00:00Z", conn=conn)
    failed = jobq.enqueue("always_fail", {"why": "demo"}, max_retries=1, conn=conn)
    jobq.enqueue("noop", queue="mail", conn=conn)
    queues.pause("mail", reason="smtp down", conn=conn)  # an audit row; the mail job stays due
    wait_for(lambda: scalar(conn, "SELECT status FROM jobs WHERE id = %s", slow.id) == "running", 30, "slow running")
    wait_for(lambda: scalar(conn, "SELECT jsonb_array_length(errors) FROM jobs WHERE id = %s", failed.id), 30,
             "a failed attempt")
    group = scalar(conn, "SELECT id FROM jobq_dead_letter_groups LIMIT 1")
    fill_minutes(conn)
    pages = {**PAGES, "job": f"/dashboard/jobs/{failed.id}", "running-job": f"/dashboard/jobs/{slow.id}",
             "scheduled-job": f"/dashboard/jobs/{later.id}", "dead-letter-group": f"/dashboard/dead-letter/groups/{group}"}
    for name, path in pages.items():
        page.open(path)
        assert page.find("main h1").text, name
        assert page.find("nav[aria-label=Dashboard]")
        page.screenshot(name)
        # On a phone the page fits its width: tables scroll inside their own box.
        assert page.screenshot(f"{name}-phone", PHONE) <= PHONE[0], name
        assert page.console_errors() == [], name
    page.open("/dashboard?window=1h")
    # four charts, two or three lines each (looked for until found: the live refresh swaps regions)
    wait_for(lambda: len(page.find_all("svg.chart polyline")) >= 8, 10, "the charts' lines")
    legends = " ".join(item.text for item in page.find_all("ul.legend li"))
    assert " ms" in legends and "/s" in legends and "e-0" not in legends  # units, no exponents
    # One time zone, said once; times relative, the UTC instant on hover; links to the API docs and the audit page.
    assert page.text("header .zone") == "Times in UTC"
    assert page.find("header a[href='/docs']") and page.find("header a[href='/dashboard/audit']")
    page.open("/dashboard/jobs")
    stamp = page.find("#job-rows time[title]")
    assert stamp.text.endswith(" ago") or stamp.text == "just now"
    assert stamp.get_attribute("title").endswith(" UTC")
    # A scheduled job apart from the due ones: its own badge, "due in ...".
    row = page.find(f"#job-rows tr[data-job='{later.id}']")
    assert "scheduled" in row.find_element(By.CSS_SELECTOR, ".status").text and "due in " in row.text
    page.open("/dashboard/queues")
    mail = page.find("tr[data-queue=mail]").find_elements(By.CSS_SELECTOR, "td.num")
    assert [cell.text for cell in mail[:2]] == ["1", "1"]  # one due, one scheduled
    page.open(f"/dashboard/jobs/{later.id}")
    assert "to come" in page.text("ol.timeline li.future") and "in " in page.text("ol.timeline li.future")
    page.open("/dashboard/schedules")
    assert "At 03:00" in page.text("#schedule-table") and "Every minute" in page.text("#schedule-table")
    dead = scalar(conn, "SELECT original_id FROM dead_letter_jobs ORDER BY id LIMIT 1")
    page.open(f"/dashboard/jobs/{dead}")  # a dead job links its dead letter's group, which links the job back
    page.click("#dead-letter-link")
    wait_for(lambda: "/dashboard/dead-letter/groups/" in page.driver.current_url, 10, "the dead letter's group")
    assert page.find(f"a[href='/dashboard/jobs/{dead}']")
    jobq.cancel(slow.id, actor="tester", conn=conn)
    page.open("/dashboard/audit")
    assert "pause" in page.text("#audit-table") and "smtp down" in page.text("#audit-table")
    assert page.find(f"#audit-table a[href='/dashboard/jobs/{slow.id}']").text == f"job {slow.id}"
    jobq.enqueue("is_prmie", conn=conn)  # a typo: the live workers announced their types, none has it
    typo = jobq.enqueue("is_prmie", run_at="2099-01-01T00:00:00Z", conn=conn)
    # The due one is claimed by a worker for a moment (its run fails: no handler) and is
    # pending again, with a retry, once that failure is written.
    wait_for(lambda: page.open("/dashboard") or "is_prmie (2 pending)" in page.text("#no-handler"), 10,
             "both typo jobs shown pending")
    page.open("/dashboard/jobs")
    assert "no handler" in page.text(f"#job-rows tr[data-job='{typo.id}']")
    assert "no handler" not in page.text(f"#job-rows tr[data-job='{later.id}']")
    page.open("/dashboard/jobs?schedule=nightly_report")
    assert "schedule = nightly_report" in page.text("#active-filters")
    # Keyboard: the skip link comes first and every control is reachable.
    page.open("/dashboard/queues")
    page.find("body").send_keys("\t")
    assert page.script("return document.activeElement.className") == "skip"


def shown_jobs(page: Browser) -> list[str] | None:
    """The ids of the job rows shown, or None when the live refresh replaced one while
    they were read."""
    try:
        return [row.get_attribute("data-job") for row in page.find_all("#job-rows tr[data-job]")]
    except StaleElementReferenceException:
        return None


def test_the_filter_shows_the_right_rows(page: Browser, conn):
    wanted = [jobq.enqueue("resize", {"i": i}, tags=["import:7"], conn=conn).id for i in range(3)]
    jobq.enqueue("resize", {"i": 9}, conn=conn)
    jobq.enqueue("send_mail", {"i": 1}, tags=["import:7"], queue="mail", conn=conn)
    page.open("/dashboard/jobs")
    page.find("#f-type").send_keys("resize")
    page.find("#f-tag").send_keys("import:7")
    page.click("form.filters button[type=submit]")
    wait_for(lambda: "tag=import" in page.driver.current_url, 10, "the filtered page")
    wait_for(lambda: shown_jobs(page) == [str(i) for i in sorted(wanted, reverse=True)], 10, "the filtered rows")
    assert "Counts exact" in page.text("#count-note")
    # The status tab keeps the filter and counts only its rows.
    assert page.find("#status-tabs a[aria-current=page]").text.startswith("All 3")
    page.open("/dashboard/jobs?queue=mail")
    wait_for(lambda: shown_jobs(page) == ["5"], 10, "the mail queue's one row")
    assert page.console_errors() == []


def test_all_matching_retries_2000_dead_jobs_through_the_confirmation(page: Browser, conn):
    fill_dead(conn, 2000)
    jobq.enqueue("noop", conn=conn)  # pending: not matched
    page.open("/dashboard/jobs?status=dead")
    assert "2,000" in page.text("#status-tabs a[aria-current=page]")
    page.click("#all-matching")
    Select(page.find("#bulk-action")).select_by_value("retry")
    page.click("#bulk button[type=submit]")
    wait_for(lambda: page.find_all("#matched"), 10, "the confirmation")
    assert page.text("#matched") == "2,000"
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE retried_as IS NOT NULL") == 0  # nothing changed yet
    page.click("#confirm")
    wait_for(lambda: "/dashboard/operations/" in page.driver.current_url, 10, "the operation's page")
    wait_for(lambda: scalar(conn, "SELECT state FROM jobq_operations") == "done", 60, "the operation done")
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'dead' AND retried_as IS NOT NULL") == 2000
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'pending'") == 2001
    assert scalar(conn, "SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NULL") == 0
    actors = {row[0] for row in conn.execute("SELECT actor FROM jobq_audit WHERE action = 'bulk_retry'")}
    assert actors == {"dashboard:anonymous"}
    wait_for(lambda: page.text("#op-changed") == "2,000", 20, "the page showing the operation done")
    assert page.console_errors() == []


def test_dead_letters_are_replayed_when_selected_and_discarded_by_group(page: Browser, conn):
    fill_dead(conn, 5)
    group = scalar(conn, "SELECT id FROM jobq_dead_letter_groups")
    page.open("/dashboard/dead-letter")
    assert page.text(f"tr[data-group='{group}'] td.num") == "5"
    page.click(f"tr[data-group='{group}'] td a")
    wait_for(lambda: len(page.find_all("#letter-rows input[name=selected]")) == 5, 10, "the group's five letters")
    for row in (1, 2):  # each box found as it is clicked: the live refresh may replace the rows in between
        page.click(f"#letter-rows tr:nth-child({row}) input[name=selected]")
    assert page.text("#selection-count") == "2 selected"
    page.click("button[data-confirm-selected=Replay]")
    alert = page.driver.switch_to.alert
    assert alert.text == "Replay 2 selected?"
    alert.accept()
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM dead_letter_jobs WHERE replayed_at IS NOT NULL") == 2, 10,
             "two letters replayed")
    page.click("a.button.danger")  # discard the whole group: its confirmation first
    wait_for(lambda: page.find_all("#matched"), 10, "the confirmation")
    assert page.text("#matched") == "3"
    page.click("#confirm")
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM dead_letter_jobs") == 2, 20, "the rest discarded")
    actions = {row[0] for row in conn.execute("SELECT action FROM jobq_audit")}
    assert {"dead_letter.replay", "bulk_discard"} <= actions
    assert page.console_errors() == []


def test_a_queue_paused_by_its_button_has_none_of_its_jobs_claimed(page: Browser, conn, daemon):
    daemon(2, JOBQ_HANDLERS=HANDLERS)
    first = jobq.enqueue("noop", conn=conn)
    wait_for(lambda: scalar(conn, "SELECT status FROM jobs WHERE id = %s", first.id) == "done", 30, "a first job done")
    page.open("/dashboard/queues")
    page.find("#reason-1").send_keys("browser test")
    page.click("#pause-default")
    wait_for(lambda: page.find_all("#resume-default"), 10, "the resume button")
    assert scalar(conn, "SELECT paused_by FROM jobq_queues WHERE name = 'default'") == "dashboard:anonymous"
    assert scalar(conn, "SELECT reason FROM jobq_queues WHERE name = 'default'") == "browser test"
    later = [jobq.enqueue("noop", conn=conn).id for _ in range(5)]
    time.sleep(2.5)  # more than a poll interval of the test daemon
    claimed = scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND claimed_at IS NOT NULL", later)
    assert claimed == 0
    page.click("#resume-default")
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status = 'done'", later) == 5,
             30, "the jobs done after the resume")
    assert page.console_errors() == []


def test_the_keyboard_alone_reaches_and_presses_a_queues_pause_button(page: Browser, conn):
    jobq.enqueue("noop", conn=conn)  # the default queue exists, with a job waiting
    page.open("/dashboard/queues")
    reached = []
    for _ in range(60):  # Tab through the page, as a keyboard user does
        page.press(Keys.TAB)
        reached.append(page.focused())
        if reached[-1] == "pause-default":
            break
    assert reached[-1] == "pause-default", reached
    page.press(Keys.ENTER)
    wait_for(lambda: scalar(conn, "SELECT paused_at IS NOT NULL FROM jobq_queues WHERE name = 'default'"), 10,
             "the queue paused by Enter on its button")
    assert page.console_errors() == []


def test_a_running_job_is_cancelled_from_its_page(page: Browser, conn, daemon):
    daemon(1, JOBQ_HANDLERS=HANDLERS)
    job = jobq.enqueue("slow", {"sleep_seconds": 60}, conn=conn)
    wait_for(lambda: scalar(conn, "SELECT status FROM jobs WHERE id = %s", job.id) == "running", 30, "running")
    page.open(f"/dashboard/jobs/{job.id}")
    assert not page.find_all("#action-retry") and not page.find_all("#action-delete")  # only valid actions
    page.click("#action-cancel")
    alert = page.driver.switch_to.alert
    assert alert.text == f"Cancel job {job.id}?"
    alert.accept()
    wait_for(lambda: scalar(conn, "SELECT status FROM jobs WHERE id = %s", job.id) == "cancelled", 10, "cancelled")
    assert scalar(conn, "SELECT cancelled_by FROM jobs WHERE id = %s", job.id) == "dashboard:anonymous"
    wait_for(lambda: page.find_all("#action-retry"), 10, "the retry button of a cancelled job")
    assert page.console_errors() == []


def test_a_job_enqueued_meanwhile_appears_and_reaches_done_without_a_reload(page: Browser, conn, daemon):
    daemon(1, JOBQ_HANDLERS=HANDLERS)
    older = jobq.enqueue("noop", run_at="2099-01-01T00:00:00Z", conn=conn)
    page.open("/dashboard/jobs")
    page.script("window.localStorage.setItem('jobq.dashboard.refresh', '1')")
    page.open("/dashboard/jobs")
    assert Select(page.find("#refresh")).first_selected_option.get_attribute("value") == "1"
    page.script("window.notReloaded = true")
    page.click(f"input[name=selected][value='{older.id}']")
    job = jobq.enqueue("slow", {"sleep_seconds": 1.5}, conn=conn)
    row = f"#job-rows tr[data-job='{job.id}'] .status"
    wait_for(lambda: page.find_all(row), 10, "the new job's row")
    wait_for(lambda: page.find_all(row) and page.text(row) == "done", 30, "the row saying done")
    assert page.script("return window.notReloaded") is True
    kept = page.script(f"return document.querySelector(\"input[name=selected][value='{older.id}']\").checked")
    assert kept is True  # the selection survived the refreshes
    assert page.text("#selection-count") == "1 selected"
    assert page.console_errors() == []


@pytest.fixture(scope="module")
def guarded(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    web = WebServer(database_url, tmp_path_factory.mktemp("dashboard-token"), JOBQ_API_TOKEN=TOKEN).start()
    yield web
    web.stop()


def test_with_a_token_the_dashboard_asks_for_it_once_and_the_api_stays_bearer_only(guarded, browser, conn):
    base = f"http://127.0.0.1:{guarded.port}"
    driver = browser.driver
    # The page an earlier test left open stops polling (its job deleted since: a 404 in
    # the console), and the console is read empty: what it holds is theirs.
    driver.get("about:blank")
    browser.console_errors()
    driver.get(base + "/dashboard/queues")
    assert "/dashboard/login" in driver.current_url
    assert browser.screenshot("login") > 0 and browser.console_errors() == []
    driver.find_element(By.ID, "token").send_keys("not the token")
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    # The click starts the form's load and may return before the answer is shown.
    wait_for(lambda: browser.find_all(".problem"), 10, "the refused login's page")
    assert browser.text(".problem") == "That is not the token."
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait_for(lambda: driver.current_url == base + "/dashboard/queues", 10, "the page asked for")
    cookie = driver.get_cookie("jobq_dashboard")
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/dashboard"
    driver.get(base + "/dashboard/jobs")
    assert driver.find_element(By.CSS_SELECTOR, "main h1").text == "Jobs"
    # The cookie opens the dashboard only: the API wants the bearer token.
    session = {"Cookie": f"jobq_dashboard={cookie['value']}"}
    assert guarded.request("GET", "/jobs", headers=session).status == 401
    assert guarded.request("GET", "/dashboard/queues", headers=session).status == 200
    assert guarded.request("GET", "/dashboard/queues").status == 302
    assert guarded.request("GET", "/dashboard/static/dashboard.css").status == 200  # open, like /health
    # An action without the CSRF token, or from another site, is refused; with both, done.
    form = {"Content-Type": "application/x-www-form-urlencoded", **session}
    pause = "/dashboard/queues/default/pause"
    assert guarded.request("POST", pause, raw=b"reason=x", headers=form).status == 403
    csrf = driver.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
    body = urllib.parse.urlencode({"csrf": csrf}).encode()
    evil = {**form, "Origin": "https://evil.example"}
    assert guarded.request("POST", pause, raw=body, headers=evil).status == 403
    assert guarded.request("POST", pause, raw=body).status == 401  # no cookie
    assert scalar(conn, "SELECT count(*) FROM jobq_queues") == 0
    assert guarded.request("POST", pause, raw=body, headers=form).status == 302
    actor = scalar(conn, "SELECT paused_by FROM jobq_queues WHERE name = 'default'")
    api_actor = json.loads(guarded.request("POST", "/queues/default/resume",
                                           headers={"Authorization": f"Bearer {TOKEN}"}).body)
    assert api_actor["changed"] == ["default"]
    audit_actor = scalar(conn, "SELECT actor FROM jobq_audit WHERE action = 'resume'")
    assert actor.startswith("dashboard:") and actor[len("dashboard:"):] == audit_actor[len("api:"):]
    # Logging out ends it.
    driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait_for(lambda: "/dashboard/login" in driver.current_url, 10, "the login page")
    driver.get(base + "/dashboard/jobs")
    assert "/dashboard/login" in driver.current_url
    browser.console_errors()  # the refused login's 401 is logged; nothing else to check here
