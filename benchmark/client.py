"""Submitting jobs over HTTP from many concurrent clients: aiohttp (keep-alive), or
wrk, a load generator in C, when installed (``apt-get install wrk``): on a small
machine the client shares the CPU with the server, and wrk's share is a fraction of
Python's."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

# Each wrk thread stops after its share of the requests; non-2xx answers are counted.
WRK_SCRIPT = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[%(body)s]]
local sent = 0
local limit = %(per_thread)d
request = function()
  sent = sent + 1
  if sent > limit then wrk.thread:stop() end
  return wrk.format()
end
response = function(status, headers, body)
  if status >= 300 then io.stderr:write("status " .. status .. "\n") end
end
"""

Body = dict[str, Any]


def submit(
    base: str,
    bodies: Sequence[Body],
    *,
    concurrency: int,
    batch: int = 0,
    token: str | None = None,
    answers: bool = True,
    on_done: Callable[[int], None] | None = None,
) -> list[Body]:
    """POST every body, ``concurrency`` requests in flight, as single ``POST /jobs``
    requests (``batch`` 0) or ``POST /jobs/batch`` of ``batch`` jobs. Returns the jobs
    the API answered with, in the order given (without ``answers``, nothing: the
    answers are not even parsed); raises on any non-2xx answer."""
    return asyncio.run(_submit(base, bodies, concurrency, batch, token, answers, on_done or (lambda n: None)))


async def _submit(
    base: str,
    bodies: Sequence[Body],
    concurrency: int,
    batch: int,
    token: str | None,
    answers: bool,
    on_done: Callable[[int], None],
) -> list[Body]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    chunks = [bodies[i : i + batch] for i in range(0, len(bodies), batch)] if batch else [[b] for b in bodies]
    results: list[list[Body]] = [[] for _ in chunks]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(chunks)):
        queue.put_nowait(index)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(base, connector=connector, headers=headers) as session:

        async def client() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                chunk = chunks[index]
                path, body = ("/jobs/batch", {"jobs": list(chunk)}) if batch else ("/jobs", chunk[0])
                async with session.post(path, json=body) as response:
                    answer = await _answer(response, answers)
                if answers:
                    results[index] = answer["jobs"] if batch else [answer]
                on_done(len(chunk))

        await asyncio.gather(*(client() for _ in range(min(concurrency, len(chunks)))))
    return [job for chunk in results for job in chunk]


async def _answer(response: aiohttp.ClientResponse, parse: bool) -> Any:
    if response.status >= 300:
        raise RuntimeError(f"{response.method} {response.url.path}: {response.status} {await response.text()}")
    return await response.json() if parse else await response.read()


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def submit_with_wrk(
    base: str, body: dict[str, Any], n: int, *, concurrency: int, enqueued: Callable[[], int], threads: int = 2
) -> None:
    """POST the same body n times as single ``POST /jobs`` requests over
    ``concurrency`` keep-alive connections. wrk runs for a duration, not a count: each
    of its threads stops sending after its share, and it is stopped once
    ``enqueued()`` (the database's count) reaches n. Raises on any non-2xx answer."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(WRK_SCRIPT % {"body": json.dumps(body), "per_thread": -(-n // threads)})
        errors = Path(tmp) / "errors"
        with open(errors, "w") as err:
            proc = subprocess.Popen(
                ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", "3600s", "--timeout", "10s",
                 "-s", str(script), base + "/jobs"],
                stdout=subprocess.DEVNULL, stderr=err,
            )
            try:
                while proc.poll() is None and enqueued() < n:
                    time.sleep(0.02)
            finally:
                proc.terminate()
                proc.wait()
        problems = errors.read_text()
    if problems.strip():
        raise RuntimeError(f"wrk: {problems.strip()[:500]}")
