"""Django's database, as jobq reaches it: the psycopg connection under a Django
connection (so that a job is written in Django's transaction), and a libpq URL made from
Django's ``DATABASES`` (what ``manage.py jobq_worker`` and ``jobq_migrate`` give jobq
when ``DATABASE_URL`` is not set)."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connections
from psycopg.conninfo import make_conninfo

from jobq.errors import ConfigError
from jobq.store.foreign import Borrowed

# The keys of Django's connection parameters that are libpq's own (the rest are psycopg
# objects: a cursor factory, an adapters context).
LIBPQ_KEYS = ("dbname", "user", "password", "host", "port", "sslmode", "options", "application_name",
              "sslrootcert", "sslcert", "sslkey", "passfile", "service", "connect_timeout")


def psycopg_connection(alias: str) -> psycopg.Connection[Any]:
    """The psycopg 3 connection of Django's connection ``alias``, opened if need be: in
    its transaction inside ``transaction.atomic()``, autocommit outside (Django's way).
    Raises ConfigError for a database that is not PostgreSQL on psycopg 3."""
    wrapper = connections[alias]
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigError(
            "TASKS", f"jobq's backend needs DATABASES[{alias!r}] on PostgreSQL with psycopg 3, not {type(raw).__module__}"
        )
    return Borrowed(raw)  # jobq's statements on Django's session, with psycopg's own jsonb loader


def database_url(alias: str) -> str:
    """A libpq connection string for Django's database ``alias``."""
    params = connections[alias].get_connection_params()
    return make_conninfo(**{key: str(params[key]) for key in LIBPQ_KEYS if params.get(key) not in (None, "")})
