"""The record of applied migrations (jobq_migrations) and the advisory lock that a
migration runs under. The DDL itself is in the numbered files of
``jobq/store/migrations/NNNN_name.sql``; the table's own CREATE is
:data:`jobq.store.migrate.MIGRATIONS_TABLE_CREATE` (the table that records migrations
cannot be created by one).

Run by :mod:`jobq.store.migrate` (``jobq migrate``).
"""

from __future__ import annotations

# MIGRATION_LOCK: the session-level advisory lock on the reserved key locks.MIGRATIONS
# (in the namespace); waits while another migrate holds it. Touches no table.
MIGRATION_LOCK = "SELECT pg_advisory_lock(%(key)s)"

# MIGRATION_UNLOCK: releases MIGRATION_LOCK (false, and a server warning, if not held).
MIGRATION_UNLOCK = "SELECT pg_advisory_unlock(%(key)s)"

# MIGRATION_TABLE_EXISTS: whether jobq_migrations exists yet (a catalog lookup, no
# lock); a database without it is at version 0.
MIGRATION_TABLE_EXISTS = "SELECT to_regclass('jobq_migrations') IS NOT NULL"

# MIGRATION_GET_VERSION: the newest recorded version (max of the primary key, a table
# of a few rows; no lock).
MIGRATION_GET_VERSION = "SELECT coalesce(max(version), 0) FROM jobq_migrations"

# MIGRATION_LIST_VERSIONS: every version recorded (numbers may have gaps: jobq.store.migrate).
MIGRATION_LIST_VERSIONS = "SELECT version FROM jobq_migrations"

# JOB_EXISTS_ANY: whether jobs holds a row (one row read at most): a conversion of the
# table (jobq.store.migrate.CONVERSIONS) is applied unasked only where it holds none.
JOB_EXISTS_ANY = "SELECT EXISTS (SELECT FROM jobs)"

# MIGRATION_RECORD: one file applied, in the same transaction as its DDL; run under
# MIGRATION_LOCK, and the primary key on version refuses a second record of a file.
MIGRATION_RECORD = "INSERT INTO jobq_migrations (version, name) VALUES (%(version)s, %(name)s)"

# MIGRATION_FUNCTIONS_PIN_EXISTS: whether jobq_functions_pin() exists (schema 18): a
# catalog lookup, no lock.
MIGRATION_FUNCTIONS_PIN_EXISTS = "SELECT to_regproc('jobq_functions_pin') IS NOT NULL"

# MIGRATION_FUNCTIONS_PIN: every jobq function of the schema given its own search_path
# (migration 0018); run under MIGRATION_LOCK after the files, for those a later file made.
MIGRATION_FUNCTIONS_PIN = "SELECT jobq_functions_pin()"
