"""The eight built-in job types, with the seed's exact result fields.

Three do real, independently checkable work (is_prime, collatz, sha256_chain), so a
benchmark can recompute every result. Payloads are checked before any work starts:
a bad one fails the job with a message naming the field, never a hang.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from jobq.errors import BadPayload
from jobq.handlers.registry import register
from jobq.job import Job

MAX_IS_PRIME_N = 10**14  # about 5 million trial divisions, well under a second
MAX_COLLATZ_N = 10**18
MAX_SHA256_ROUNDS = 10**7
MAX_SHA256_SEED_LENGTH = 10_000
MAX_SLEEP_SECONDS = 86_400.0
FLAKY_SUCCEEDS_ON_ATTEMPT = 2


def integer_field(payload: dict[str, Any], name: str, *, low: int, high: int, default: int | None = None) -> int:
    """``payload[name]`` as an integer in ``[low, high]``; bool and float are refused."""
    value = payload.get(name, default)
    if value is None:
        raise BadPayload(f"payload.{name} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadPayload(f"payload.{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadPayload(f"payload.{name} must be between {low} and {high}, got {value}")
    return value


@register("noop")
def noop(job: Job) -> dict[str, Any]:
    return {"ok": True}


@register("echo")
def echo(job: Job) -> dict[str, Any]:
    return job.payload


@register("slow")
def slow(job: Job) -> dict[str, Any]:
    seconds = job.payload.get("sleep_seconds", 1)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_SLEEP_SECONDS:
        raise BadPayload(f"payload.sleep_seconds must be a number from 0 to {MAX_SLEEP_SECONDS:g}")
    time.sleep(seconds)
    return {"slept_for": seconds}


@register("always_fail")
def always_fail(job: Job) -> None:
    raise RuntimeError("always_fail: this job type fails on every attempt")


@register("flaky")
def flaky(job: Job) -> dict[str, Any]:
    if job.attempt < FLAKY_SUCCEEDS_ON_ATTEMPT:
        raise RuntimeError(f"flaky: failing on attempt {job.attempt}, succeeds on attempt {FLAKY_SUCCEEDS_ON_ATTEMPT}")
    return {"ok": True, "succeeded_on_attempt": job.attempt}


def is_prime(n: int) -> tuple[bool, int]:
    """Trial division. The count is 1 for the even test, then 1 per odd trial divisor
    3, 5, 7, ... up to isqrt(n), stopping at the first that divides n."""
    if n < 2:
        return False, 0
    if n % 2 == 0:
        return n == 2, 1
    checked = 1
    for divisor in range(3, math.isqrt(n) + 1, 2):
        checked += 1
        if n % divisor == 0:
            return False, checked
    return True, checked


def collatz(n: int) -> tuple[int, int, int]:
    """(steps until 1, largest value including n, sum of every value visited with n and 1)."""
    steps, peak, checksum = 0, n, n
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
        peak = max(peak, n)
        checksum += n
    return steps, peak, checksum


def sha256_chain(seed: str, rounds: int) -> str:
    """Start from the UTF-8 bytes of ``seed``; each round replaces the bytes by their raw
    SHA-256 digest; the hex of the final bytes."""
    data = seed.encode("utf-8")
    for _ in range(rounds):
        data = hashlib.sha256(data).digest()
    return data.hex()


@register("is_prime")
def is_prime_handler(job: Job) -> dict[str, Any]:
    n = integer_field(job.payload, "n", low=-(10**18), high=MAX_IS_PRIME_N)
    prime, checked = is_prime(n)
    return {"n": n, "is_prime": prime, "divisors_checked": checked}


@register("collatz")
def collatz_handler(job: Job) -> dict[str, Any]:
    n = integer_field(job.payload, "n", low=1, high=MAX_COLLATZ_N)
    steps, peak, checksum = collatz(n)
    return {"n": n, "steps": steps, "max_value": peak, "sequence_checksum": checksum}


@register("sha256_chain")
def sha256_chain_handler(job: Job) -> dict[str, Any]:
    seed = job.payload.get("seed")
    if not isinstance(seed, str) or len(seed) > MAX_SHA256_SEED_LENGTH:
        raise BadPayload(f"payload.seed must be a string of at most {MAX_SHA256_SEED_LENGTH} characters")
    rounds = integer_field(job.payload, "rounds", low=0, high=MAX_SHA256_ROUNDS, default=1000)
    return {"seed": seed, "rounds": rounds, "final_hash": sha256_chain(seed, rounds)}
