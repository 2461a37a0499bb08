"""The dashboard's workflow pages: the list by status, one workflow's graph (inline
SVG, each step coloured by status and linking to its job), its steps, its cancel and
retry buttons; a step's job page linking its workflow and its parents. In a real
headless Chromium for the graph's links."""

from __future__ import annotations

import re

import pytest

import jobq
from support.api import csrf_of
from support.browser import Browser, screenshot_dir
from support.waiting import wait_for
from support.web_server import WebServer

pytestmark = [pytest.mark.dashboard, pytest.mark.db, pytest.mark.workflows]


def order(conn):
    wf = jobq.Workflow(name="order-17")
    fetch = wf.add("noop", name="fetch", run_at="2099-01-01T00:00:00Z")
    thumbs = [wf.add("noop", {"size": s}, name=f"thumb-{s}", after=[fetch]) for s in (64, 256)]
    wf.add("noop", name="publish", after=thumbs, on_parent_failure="run")
    return wf.enqueue(conn=conn)


def test_the_list_the_graph_and_the_actions(make_app, conn):
    run = order(conn)
    client = make_app().test_client()
    listing = client.get("/dashboard/workflows").data.decode()
    assert f'href="/dashboard/workflows/{run.id}"' in listing and "order-17" in listing and "0 / 4" in listing
    assert "order-17" not in client.get("/dashboard/workflows?status=done").data.decode()

    page = client.get(f"/dashboard/workflows/{run.id}").data.decode()
    graph = re.search(r"<svg class=\"workflow-graph\".*?</svg>", page, re.S).group(0)
    for name, job in run.jobs.items():
        assert f'href="/dashboard/jobs/{job.id}"' in graph and name in graph
    assert graph.count('class="edge"') == 4
    assert graph.count("step-waiting") == 3 and graph.count("step-pending") == 1

    step_page = client.get(f"/dashboard/jobs/{run.jobs['publish'].id}").data.decode()
    assert f'href="/dashboard/workflows/{run.id}"' in step_page
    assert f'href="/dashboard/jobs/{run.jobs["thumb-64"].id}"' in step_page and "thumb-256" in step_page

    csrf = csrf_of(page.encode())
    assert client.post(f"/dashboard/workflows/{run.id}/cancel", data={"csrf": csrf}).status_code == 302
    page = client.get(f"/dashboard/workflows/{run.id}").data.decode()
    assert "step-cancelled" in page and 'id="action-retry"' in page
    assert client.post(f"/dashboard/workflows/{run.id}/retry", data={"csrf": csrf}).status_code == 302
    assert jobq.get_workflow(run.id, conn=conn).status == "running"
    actions = [a for (a,) in conn.execute("SELECT action FROM jobq_audit ORDER BY id")]
    assert actions == ["cancel_workflow", "retry_workflow"]


def test_bad_input_and_unknown_workflows_get_a_page_not_a_500(make_app, conn):
    client = make_app().test_client()
    assert client.get("/dashboard/workflows/999").status_code == 404
    assert client.get("/dashboard/workflows?status=sideways").status_code == 400


def test_the_graph_in_a_browser_links_each_step_to_its_job_and_back(conn, database_url, tmp_path):
    run = order(conn)
    web = WebServer(database_url, tmp_path).start()
    browser = Browser(f"http://127.0.0.1:{web.port}", screenshot_dir(tmp_path / "screenshots"))
    try:
        browser.open(f"/dashboard/workflows/{run.id}")
        # Looked for until found: the live refresh swaps the page's regions while a
        # find runs (a fresh-clone run on a loaded machine found none at once).
        wait_for(lambda: len(browser.find_all("svg.workflow-graph a")) == 4, 10, "the graph's four steps")
        browser.screenshot("workflow")
        assert browser.console_errors() == []
        browser.script("document.querySelector('svg.workflow-graph a[href$=\"/%d\"]').dispatchEvent("
                       "new MouseEvent('click', {bubbles: true}))" % run.jobs["publish"].id)
        wait_for(lambda: browser.driver.current_url.endswith(f"/dashboard/jobs/{run.jobs['publish'].id}"), 10,
                 "the step's job page")
        assert f"workflow {run.id}" in browser.text("#job-workflow")
        assert browser.console_errors() == []
    finally:
        browser.quit()
        web.stop()
