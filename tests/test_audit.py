"""The audit trail's read side (jobq audit) and its retention (JOBQ_AUDIT_RETENTION,
pruned by the daemon's maintenance leader)."""

from __future__ import annotations

import json
import time

import pytest

from support.cli import run_cli
from support.rows import seed
from jobq.errors import ConfigError
from jobq.settings import DEFAULT_AUDIT_RETENTION, Settings

pytestmark = [pytest.mark.control]


@pytest.mark.unit
def test_the_audit_retention_is_90_days_unless_set_and_a_bad_value_names_its_variable():
    assert Settings.from_env({}).audit_retention == DEFAULT_AUDIT_RETENTION == 90 * 24 * 3600
    assert Settings.from_env({"JOBQ_AUDIT_RETENTION": "0"}).audit_retention == 0
    for bad in ("-1", "ninety days", "nan"):
        with pytest.raises(ConfigError) as caught:
            Settings.from_env({"JOBQ_AUDIT_RETENTION": bad})
        assert caught.value.variable == "JOBQ_AUDIT_RETENTION"


@pytest.mark.db
def test_jobq_audit_prints_the_trail_newest_first(control, database_url):
    ids = seed(control, 2, "pending", delay=60)
    for job_id in ids:
        assert run_cli("run-now", str(job_id), DATABASE_URL=database_url).returncode == 0
    table = run_cli("audit", DATABASE_URL=database_url)
    assert table.returncode == 0 and "run_now" in table.stdout and f'{{"id":{ids[1]}}}' in table.stdout
    lines = run_cli("audit", "--json", "--limit", "1", DATABASE_URL=database_url).stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["target"] == {"id": ids[1]}
    assert run_cli("audit", "--limit", "0", DATABASE_URL=database_url).returncode == 2


@pytest.mark.db
def test_the_maintenance_leader_prunes_audit_rows_past_the_retention(control, daemon):
    control.execute(
        "INSERT INTO jobq_audit (at, actor, action, target) VALUES "
        "(now() - interval '2 hours', 'cli:old', 'cancel', '{}'), (now() - interval '10 minutes', 'cli:new', 'cancel', '{}')"
    )
    daemon(1, JOBQ_AUDIT_RETENTION="3600")
    deadline = time.monotonic() + 30
    while control.execute("SELECT count(*) FROM jobq_audit").fetchone()[0] == 2:
        assert time.monotonic() < deadline, "the old row was never pruned"
        time.sleep(0.1)
    assert [actor for (actor,) in control.execute("SELECT actor FROM jobq_audit")] == ["cli:new"]
