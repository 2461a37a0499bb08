"""The bulk routes through Flask's test client: POST /jobs/bulk (dry run and real run),
GET /operations/{id}, the dead-letter group actions, GET /audit, and their refusals."""

from __future__ import annotations

import time

import pytest

from support.api import assert_error
from support.rows import audit_actions, seed, seed_dead

pytestmark = [pytest.mark.control, pytest.mark.api, pytest.mark.db]


def finished(client, operation_id: int, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        operation = client.get(f"/operations/{operation_id}").get_json()
        if operation["state"] != "running":
            return operation
        assert time.monotonic() < deadline, operation
        time.sleep(0.05)


def test_a_dry_run_answers_how_many_match_and_changes_nothing(client, control):
    seed(control, 4, "pending", type="a", queue="q")
    response = client.post("/jobs/bulk", json={"filter": {"queue": "q"}, "action": "delete", "dry_run": True})
    assert (response.status_code, response.get_json()) == (200, {"matched": 4, "dry_run": True})
    assert control.execute("SELECT count(*) FROM jobs").fetchone()[0] == 4
    assert control.execute("SELECT count(*) FROM jobq_operations").fetchone()[0] == 0


def test_a_real_run_answers_202_with_the_operation_and_carries_it_out(client, control):
    seed(control, 3, "pending", type="a", delay=600)
    seed(control, 2, "running", type="a")
    response = client.post("/jobs/bulk", json={"filter": {"type": "a"}, "action": "set_priority", "priority": 10})
    assert response.status_code == 202
    operation = response.get_json()
    assert (operation["state"], operation["action"], operation["target"]) == ("running", "set_priority", {"filter": {"type": "a"}})
    done = finished(client, operation["id"])
    assert (done["state"], done["matched"], done["changed"], done["skipped"]) == ("done", 5, 3, 2)
    assert done["finished_at"] >= done["started_at"] and done["params"]["priority"] == 10
    assert [counts["state"] for _, _, counts in audit_actions(control)] == ["running", "done"]


def test_a_dead_letter_group_is_replayed_through_the_api(client, control):
    seed_dead(control, 12, type="pay")
    group = control.execute("SELECT id FROM jobq_dead_letter_groups").fetchone()[0]
    response = client.post(f"/dead-letter/groups/{group}/replay")
    assert response.status_code == 202 and response.get_json()["target"] == {"dead_letter_group": group}
    done = finished(client, response.get_json()["id"])
    assert (done["matched"], done["changed"]) == (12, 12)
    assert_error(client.post("/dead-letter/groups/0123456789abcdef/discard"), 404)
    assert_error(client.post("/dead-letter/groups/NOT-A-GROUP/discard"), 400)
    assert_error(client.get("/operations/999"), 404)


def test_the_audit_trail_is_read_newest_first_a_page_at_a_time(client, control):
    [job_id] = seed(control, 1, "pending", delay=600)
    for _ in range(2):
        client.post(f"/jobs/{job_id}/run-now")  # the second is refused (already due): no row
    client.post(f"/jobs/{job_id}/cancel")
    client.delete(f"/jobs/{job_id}")  # refused: cancelled
    page = client.get("/audit?limit=1").get_json()
    assert [entry["action"] for entry in page["items"]] == ["cancel"]
    rest = client.get(f"/audit?before={page['next_before']}").get_json()
    assert [entry["action"] for entry in rest["items"]] == ["run_now"] and rest["next_before"] is None
    assert rest["items"][0]["target"] == {"id": job_id} and rest["items"][0]["actor"] == "api:anonymous"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"action": "retry"}, ["body", "filter"]),
        ({"filter": {"status": "dead"}, "action": "explode"}, ["body", "action"]),
        ({"filter": {"status": "gone"}, "action": "retry"}, ["body", "filter", "status"]),
        ({"filter": {"stauts": "dead"}, "action": "retry"}, ["body", "filter", "stauts"]),
        ({"filter": {"ids": [1, -2]}, "action": "retry"}, ["body", "filter", "ids", 1]),
        ({"filter": {"created_after": 17}, "action": "retry"}, ["body", "filter", "created_after"]),
        ({"filter": {"tag": "x" * 101}, "action": "retry"}, ["body", "filter", "tag"]),
        ({"filter": {"status": "dead"}, "action": "retry", "dry_run": "yes"}, ["body", "dry_run"]),
        ({"filter": {"status": "dead"}, "action": "set_priority", "priority": True}, ["body", "priority"]),
    ],
)
def test_a_bad_bulk_request_is_a_422_naming_the_field(client, control, body, where):
    detail = assert_error(client.post("/jobs/bulk", json=body), 422)
    assert detail[0]["loc"] == where
    assert control.execute("SELECT count(*) FROM jobq_operations").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"filter": {}, "action": "retry"}, "filter:"),
        ({"filter": {"status": "pending"}, "action": "set_priority"}, "priority:"),
        ({"filter": {"status": "dead"}, "action": "retry", "priority": 3}, "priority:"),
    ],
)
def test_a_bulk_request_that_does_not_hold_together_is_a_422_saying_which_field(client, control, body, named):
    detail = assert_error(client.post("/jobs/bulk", json=body), 422)
    assert named in detail[0]["msg"]
