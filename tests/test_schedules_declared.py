"""Schedules as code declares them, no database: slot arithmetic (jobq.schedules.cron) and
jobq.periodic's declarations (jobq.schedules.declarations). Stored and fired:
test_schedules_stored.py; by the real daemon: test_schedules_daemon.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import jobq
from jobq.schedules import declarations as periodic_module
from jobq.schedules.cron import Cron, CronError
from jobq.errors import InvalidArgument

pytestmark = [pytest.mark.unit, pytest.mark.schedules]

UTC = timezone.utc


def at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def walk(cron: Cron, start: datetime, n: int) -> list[datetime]:
    slots = []
    for _ in range(n):
        start = cron.next_after(start)
        slots.append(start)
    return slots


# Europe/Berlin in 2026: CET (+1) to CEST (+2) at 01:00Z on 29 March (02:00 -> 03:00
# local), back at 01:00Z on 25 October (03:00 -> 02:00 local: 02:00-02:59 twice).


def test_a_slot_in_the_spring_gap_fires_once_right_after_the_gap():
    cron = Cron("30 2 * * *", "Europe/Berlin")
    assert walk(cron, at(2026, 3, 27, 12), 3) == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1, 0), at(2026, 3, 30, 0, 30)]


def test_every_slot_inside_one_gap_is_one_run_at_its_end():
    cron = Cron("*/20 2 * * *", "Europe/Berlin")
    slots, capped = cron.due(at(2026, 3, 28, 0), at(2026, 3, 30, 0, 59), limit=100)
    assert slots == [
        at(2026, 3, 28, 1, 0), at(2026, 3, 28, 1, 20), at(2026, 3, 28, 1, 40),  # 02:00, 02:20, 02:40 CET
        at(2026, 3, 29, 1, 0),  # 02:00, 02:20 and 02:40 do not exist: once, at 03:00 CEST
        at(2026, 3, 30, 0, 0), at(2026, 3, 30, 0, 20), at(2026, 3, 30, 0, 40),  # CEST
    ]
    assert not capped
    assert walk(cron, at(2026, 3, 28, 23), 2) == [at(2026, 3, 29, 1, 0), at(2026, 3, 30, 0, 0)]


def test_a_slot_that_exists_twice_in_the_fall_fires_once_at_its_first_occurrence():
    cron = Cron("30 2 * * *", "Europe/Berlin")
    assert walk(cron, at(2026, 10, 23, 12), 3) == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    slots, _ = cron.due(at(2026, 10, 24, 0), at(2026, 10, 26, 12), limit=100)
    assert slots == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]


def test_the_repeated_hour_fires_nothing_for_a_schedule_of_wall_clock_slots():
    cron = Cron("*/30 * * * *", "Europe/Berlin")
    # 02:00 and 02:30 CEST, then the repeated 02:00 and 02:30 (CET) are skipped, then 03:00 CET.
    assert walk(cron, at(2026, 10, 24, 23, 45), 3) == [at(2026, 10, 25, 0, 0), at(2026, 10, 25, 0, 30), at(2026, 10, 25, 2, 0)]


def test_from_inside_the_repeated_hour_the_next_slot_is_after_it_and_the_due_ones_are_before():
    cron = Cron("*/30 * * * *", "Europe/Berlin")
    inside = at(2026, 10, 25, 1, 10)  # 02:10 CET, the second 02:10
    assert cron.next_after(inside) == at(2026, 10, 25, 2, 0)
    assert cron.due(at(2026, 10, 25, 0, 0), inside, limit=100) == ([at(2026, 10, 25, 0, 0), at(2026, 10, 25, 0, 30)], False)


def test_utc_has_no_dst_and_is_the_default():
    cron = Cron("30 2 * * *")
    assert walk(cron, at(2026, 3, 28, 12), 2) == [at(2026, 3, 29, 2, 30), at(2026, 3, 30, 2, 30)]
    assert walk(cron, at(2026, 10, 24, 12), 2) == [at(2026, 10, 25, 2, 30), at(2026, 10, 26, 2, 30)]


def test_a_sixth_field_counts_seconds_as_croniter_does():
    cron = Cron("* * * * * */2")
    assert walk(cron, at(2026, 1, 1, 0, 0, 0), 3) == [at(2026, 1, 1, 0, 0, 2), at(2026, 1, 1, 0, 0, 4), at(2026, 1, 1, 0, 0, 6)]


def test_due_keeps_the_latest_slots_and_says_when_it_left_older_ones_out():
    cron = Cron("0 * * * *")
    assert cron.due(at(2026, 1, 1, 0), at(2026, 1, 1, 5, 30), limit=2) == ([at(2026, 1, 1, 4), at(2026, 1, 1, 5)], True)
    assert cron.due(at(2026, 1, 1, 0), at(2026, 1, 1, 5), limit=6) == (
        [at(2026, 1, 1, h) for h in range(6)], False
    )
    assert cron.due(at(2026, 1, 1, 5, 1), at(2026, 1, 1, 5, 59), limit=6) == ([], False)


def test_due_over_a_whole_day_of_seconds_is_cheap():
    cron = Cron("* * * * * *")
    slots, capped = cron.due(at(2026, 1, 1), at(2026, 1, 2), limit=100)
    assert capped and len(slots) == 100 and slots[-1] == at(2026, 1, 2)


@pytest.mark.parametrize("expression", ["* * *", "61 * * * *", "0 0 30 2 *", "* * * * * * * *", "@often"])
def test_a_bad_expression_is_refused(expression):
    with pytest.raises(CronError):
        Cron(expression)


# -- declarations -----------------------------------------------------------------------


@pytest.fixture
def declarations():
    saved = periodic_module.declared()
    periodic_module._declared.clear()
    yield periodic_module._declared
    periodic_module._declared.clear()
    periodic_module._declared.update(saved)


def test_periodic_above_register_takes_the_registered_name(declarations):
    @jobq.periodic("0 3 * * *", tz="Europe/Berlin", overlap="skip", payload={"kind": "daily"}, queue="reports", priority=7)
    @jobq.register("nightly_report_test", timeout=600)
    def nightly(job):
        return None

    schedule = declarations["nightly_report_test"]
    assert (schedule.type, schedule.tz, schedule.overlap, schedule.catch_up) == ("nightly_report_test", "Europe/Berlin", "skip", "latest")
    assert (schedule.queue, schedule.priority, schedule.payload) == ("reports", 7, {"kind": "daily"})


def test_a_plain_call_names_a_type_registered_elsewhere(declarations):
    schedule = jobq.periodic("0 * * * *", name="hourly_cleanup", type="cleanup", payload={"days": 7})
    assert declarations == {"hourly_cleanup": schedule}
    assert schedule.type == "cleanup" and schedule.max_retries == 3


def test_periodic_on_an_unregistered_function_is_an_error_naming_it(declarations):
    with pytest.raises(InvalidArgument, match="'lonely'.*register"):
        @jobq.periodic("0 * * * *")
        def lonely(job):
            return None


@pytest.mark.parametrize(
    "arguments, field",
    [
        ({"cron": "0 25 * * *"}, "schedule 'daily' cron"),
        ({"tz": "Mars/Olympus"}, "schedule 'daily' tz"),
        ({"tz": "../etc/passwd"}, "schedule 'daily' tz"),
        ({"catch_up": "some"}, "schedule 'daily' catch_up"),
        ({"overlap": "never"}, "schedule 'daily' overlap"),
        ({"priority": 11}, "schedule 'daily' priority"),
        ({"payload": {"x": float("nan")}}, "schedule 'daily' payload"),
        ({"name": "has space"}, "schedule 'has space'"),
        ({"name": "x" * 101}, "schedule '" + "x" * 101 + "'"),
    ],
)
def test_a_bad_declaration_is_an_error_at_import_naming_the_schedule(declarations, arguments, field):
    values = {"cron": "0 3 * * *", "name": "daily", "type": "noop", **arguments}
    with pytest.raises(InvalidArgument) as caught:
        jobq.periodic(values.pop("cron"), **values)
    assert caught.value.field == field
    assert declarations == {}


def test_the_definition_hash_changes_with_what_the_code_decides(declarations):
    first = jobq.periodic("0 3 * * *", name="daily", type="noop")
    assert jobq.periodic("0 3 * * *", name="daily", type="noop").definition_hash() == first.definition_hash()
    assert jobq.periodic("0  3 * * *", name="daily", type="noop").definition_hash() == first.definition_hash()
    assert jobq.periodic("0 4 * * *", name="daily", type="noop").definition_hash() != first.definition_hash()
    assert jobq.periodic("0 3 * * *", name="daily", type="noop", overlap="skip").definition_hash() != first.definition_hash()
    assert list(periodic_module.hashes()) == ["daily"]
