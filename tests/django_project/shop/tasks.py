"""The shop's tasks."""

import asyncio

from django.db import connection
from django_tasks import task


@task()
def add(a: int, b: int) -> dict:
    """Adds, and says which database it ran against (Django's ORM works in the worker)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        (name,) = cursor.fetchone()
    return {"sum": a + b, "database": name}


@task(queue_name="emails", priority=50)
def send_receipt(order: int) -> str:
    return f"receipt for order {order}"


@task()
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task(takes_context=True)
def attempt_of(context) -> int:
    return context.attempt


@task()
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b
