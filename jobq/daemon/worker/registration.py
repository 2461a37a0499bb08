"""What a worker makes known at boot: its handler modules imported, its row in
``workers`` (its queues, or every queue, and the job types it has handlers for: what
shows jobs of other types as "no handler"), and the periodic schedules its modules
declare. The heartbeat registers the row again when a reaper removed it as stale."""

from __future__ import annotations

import os

import psycopg

from jobq.daemon import presence
from jobq.daemon.worker.served import ServedQueues
from jobq.daemon.worker.session import ClaimSession
from jobq.handlers import registry
from jobq.schedules import declarations, stored
from jobq.settings import Settings


class BootFailure(Exception):
    """The worker cannot start (a handler module does not import, the schema is too old)."""


def load_handlers(settings: Settings) -> None:
    """Import the built-in handlers and JOBQ_HANDLERS' modules; any error stops the boot."""
    try:
        registry.load(settings.handlers)
    except Exception as exc:
        raise BootFailure(f"cannot import handler modules {','.join(settings.handlers)}: "
                          f"{type(exc).__name__}: {exc}") from exc


def announce(conn: psycopg.Connection, *, worker_id: str, hostname: str, queues: ServedQueues) -> None:
    """Register the worker's row: its queues (or every queue) and its handler types."""
    presence.register(conn, worker_id, hostname, os.getpid(), queues.registered,
                      all_queues=queues.every, handler_types=registry.names())


def declare_schedules(session: ClaimSession, *, worker_id: str, stale_seconds: float) -> None:
    """Record the periodic schedules the handler modules declared on the worker's row,
    and upsert them (the newest changed definition wins; a pause stays)."""
    declared = declarations.declared()
    hashes = {name: schedule.definition_hash() for name, schedule in declared.items()}
    session.run(lambda conn, _: presence.declare(conn, worker_id, hashes))
    session.run(lambda conn, _: stored.declare(conn, worker_id, declared, stale_seconds=stale_seconds))
