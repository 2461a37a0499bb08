"""Submitting jobs over HTTP from many concurrent clients (aiohttp, keep-alive)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

Body = dict[str, Any]


def submit(
    base: str,
    bodies: Sequence[Body],
    *,
    concurrency: int,
    batch: int = 0,
    token: str | None = None,
    on_done: Callable[[int], None] | None = None,
) -> list[Body]:
    """POST every body, ``concurrency`` requests in flight, as single ``POST /jobs``
    requests (``batch`` 0) or ``POST /jobs/batch`` of ``batch`` jobs. Returns the jobs
    the API answered with, in the order given; raises on any non-2xx answer."""
    return asyncio.run(_submit(base, bodies, concurrency, batch, token, on_done or (lambda n: None)))


async def _submit(
    base: str, bodies: Sequence[Body], concurrency: int, batch: int, token: str | None, on_done: Callable[[int], None]
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
                if batch:
                    async with session.post("/jobs/batch", json={"jobs": list(chunk)}) as response:
                        answer = await _json(response)
                        results[index] = answer["jobs"]
                else:
                    async with session.post("/jobs", json=chunk[0]) as response:
                        results[index] = [await _json(response)]
                on_done(len(chunk))

        await asyncio.gather(*(client() for _ in range(min(concurrency, len(chunks)))))
    return [job for chunk in results for job in chunk]


async def _json(response: aiohttp.ClientResponse) -> Any:
    if response.status >= 300:
        raise RuntimeError(f"{response.method} {response.url.path}: {response.status} {await response.text()}")
    return await response.json()
