"""jobq.contrib.sentry across a real worker: each failed run of a handler is one Sentry
event with the job as context, and its fingerprint is the job's dead-letter group, so
that one cause is one Sentry issue (sentry-sdk's transport replaced by one that writes
the envelopes' events to a file the test reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jobq
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.sentry, pytest.mark.db, pytest.mark.daemon]


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("dead_only", [False, True], ids=["every_failure", "dead_letters_only"])
def test_each_failure_is_an_event_whose_fingerprint_is_its_dead_letter_group(conn, daemon, tmp_path, dead_only):
    path = tmp_path / "envelopes.jsonl"
    daemon(1, JOBQ_HANDLERS="support.sentried", JOBQ_TEST_ENVELOPES=str(path), JOBQ_TEST_DEAD_ONLY=str(int(dead_only)))
    # Two orders, one cause: one dead-letter group, so one fingerprint.
    jobs = [jobq.enqueue("order_missing", {"order": order}, max_retries=1, tags=["shop"]) for order in (17, 4017)]
    wait_for(lambda: scalar(conn, "SELECT count(*) FROM dead_letter_jobs") == 2, 30, "both jobs dead-lettered")
    expected = 2 if dead_only else 4  # each job: attempt 0 retried, attempt 1 dead
    wait_for(lambda: len(events(path)) == expected, 10, f"{expected} events")
    (group,) = [row[0] for row in conn.execute("SELECT DISTINCT group_id FROM dead_letter_jobs")]
    seen = events(path)
    assert {tuple(event["fingerprint"]) for event in seen} == {("jobq-dead-letter-group", group)}
    assert {event["tags"]["jobq.dead_letter_group"] for event in seen} == {group}
    assert sorted((e["jobq"]["id"], e["jobq"]["attempt"], e["jobq"]["dead_letter"]) for e in seen) == sorted(
        (job.id, attempt, attempt == 1) for job in jobs for attempt in ((1,) if dead_only else (0, 1)))
    for event in seen:
        assert event["exception"] == "LookupError"
        assert {k: event["jobq"][k] for k in ("type", "queue", "tags", "max_retries")} == {
            "type": "order_missing", "queue": "default", "tags": ["shop"], "max_retries": 1}
