import hashlib
from datetime import datetime, timezone

import pytest

from jobq.handlers import execution
from jobq.handlers import builtin, registry
from jobq.handlers.registry import load
from jobq.job import Job

pytestmark = pytest.mark.unit

load([])


def job(type_: str, payload: dict, attempt: int = 0) -> Job:
    now = datetime.now(timezone.utc)
    return Job(
        id=1, type=type_, queue="default", payload=payload, status="running", priority=5, attempt=attempt,
        max_retries=3, run_at=now, claimed_at=now, started_at=now, heartbeat_at=now, completed_at=None,
        created_at=now, result=None, error=None, errors=[], worker_id="w",
    )


def run(job: Job) -> execution.RunResult:
    """Run a job as a worker does: its handler looked up, then called."""
    return execution.run(job, registry.find(job.type))


@pytest.mark.parametrize(
    ("n", "prime", "checked"),
    [(0, False, 0), (2, True, 1), (4, False, 1), (9, False, 2), (25, False, 3), (97, True, 5),
     (104729, True, 162), (15485863, True, 1968), (15485865, False, 2)],
)
def test_is_prime_vectors(n, prime, checked):
    assert builtin.is_prime_handler(job("is_prime", {"n": n})) == {"n": n, "is_prime": prime, "divisors_checked": checked}


@pytest.mark.parametrize(
    ("n", "steps", "peak", "checksum"),
    [(1, 0, 1, 1), (3, 7, 16, 49), (27, 111, 9232, 101440), (871, 178, 190996, 1634376),
     (837799, 524, 2974984576, 49478991242)],
)
def test_collatz_vectors(n, steps, peak, checksum):
    assert builtin.collatz_handler(job("collatz", {"n": n})) == {
        "n": n, "steps": steps, "max_value": peak, "sequence_checksum": checksum,
    }


@pytest.mark.parametrize(
    ("seed", "rounds", "expected"),
    [
        ("abc", 0, "616263"),
        ("abc", 1, hashlib.sha256(b"abc").hexdigest()),
        ("task-queue", 5000, "1aa4b220ca78101bcc9422d683c3eeb6dbb7000bbada700467ed0d230406fce8"),
        ("abc", None, "fc8a6b86a13f71cd9a67f558ab6fd82a3dd89186163a017ed8051acf6d3f8f99"),
    ],
)
def test_sha256_chain_vectors(seed, rounds, expected):
    payload = {"seed": seed} if rounds is None else {"seed": seed, "rounds": rounds}
    result = builtin.sha256_chain_handler(job("sha256_chain", payload))
    assert result == {"seed": seed, "rounds": 1000 if rounds is None else rounds, "final_hash": expected}


def test_is_prime_and_sha256_accept_their_documented_bounds():
    assert builtin.is_prime_handler(job("is_prime", {"n": 10**13 + 37}))["is_prime"] is True
    assert len(builtin.sha256_chain(seed="x", rounds=10**6)) == 64


def test_simple_handlers_return_the_seed_fields():
    assert run(job("noop", {})).result_json == '{"ok":true}'
    assert run(job("echo", {"a": [1, "b"]})).result_json == '{"a":[1,"b"]}'
    assert run(job("slow", {"sleep_seconds": 0.01})).result_json == '{"slept_for":0.01}'
    assert run(job("flaky", {}, attempt=2)).result_json == '{"ok":true,"succeeded_on_attempt":2}'


@pytest.mark.parametrize("attempt", [0, 1])
def test_flaky_fails_on_its_first_two_attempts(attempt):
    outcome = run(job("flaky", {}, attempt=attempt))
    assert not outcome.ok and f"attempt {attempt}" in outcome.error


def test_always_fail_fails_with_its_traceback():
    outcome = run(job("always_fail", {}))
    assert not outcome.ok
    assert "Traceback" in outcome.error and "always_fail" in outcome.error


@pytest.mark.parametrize(
    ("type_", "payload", "field"),
    [
        ("is_prime", {}, "payload.n"),
        ("is_prime", {"n": "7"}, "payload.n"),
        ("is_prime", {"n": 7.0}, "payload.n"),
        ("is_prime", {"n": True}, "payload.n"),
        ("is_prime", {"n": 10**16}, "payload.n"),
        ("collatz", {"n": 0}, "payload.n"),
        ("collatz", {"n": -5}, "payload.n"),
        ("sha256_chain", {"seed": 5}, "payload.seed"),
        ("sha256_chain", {"seed": "a", "rounds": 10**8}, "payload.rounds"),
        ("sha256_chain", {"seed": "a", "rounds": -1}, "payload.rounds"),
        ("slow", {"sleep_seconds": "1"}, "payload.sleep_seconds"),
        ("slow", {"sleep_seconds": -1}, "payload.sleep_seconds"),
    ],
)
def test_bad_payload_fails_at_once_naming_the_field(type_, payload, field):
    outcome = run(job(type_, payload))
    assert not outcome.ok
    assert field in outcome.error
    assert "Traceback" not in outcome.error
    assert outcome.seconds < 1


def test_unknown_type_fails_naming_the_type():
    outcome = run(job("no_such_type", {}))
    assert not outcome.ok and "'no_such_type'" in outcome.error


def test_result_that_is_not_json_fails_the_run():
    from jobq.handlers.registry import register

    @register("returns_a_set")
    def returns_a_set(job):
        return {"values": {1, 2}}

    outcome = run(job("returns_a_set", {}))
    assert not outcome.ok and "not storable JSON" in outcome.error
