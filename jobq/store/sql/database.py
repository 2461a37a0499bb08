"""Statements of the database and the session rather than of a table: the database's
clock, the readiness ping, the wake-up and control channels' names, the search_path of
a caller's session and jobq's trace context, the maintenance leader's advisory lock, and the listing of jobq's
advisory locks held now.

Run by :mod:`jobq.store.connections` (DATABASE_PING), :mod:`jobq.schedules.stored`,
:mod:`jobq.store.partitions`, :mod:`jobq.store.retention` and :mod:`jobq.observe.rollup`
(DATABASE_NOW), :mod:`jobq.daemon.maintenance.duties` (LEADER_TRY_LOCK) and
:mod:`jobq.observe.inspection` (ADVISORY_LOCK_LIST_OF_NAMESPACE), and the workers'
listener, :mod:`jobq.daemon.listener` (WAKE_CHANNEL_GET, CONTROL_CHANNEL_GET), and
:mod:`jobq.store.session_settings` (SESSION_SETTING_SWAP, SESSION_SETTING_RESTORE). The other advisory
locks ride with their statements: a job's in its claim and outcomes
(:mod:`jobq.store.sql.leases`, :mod:`jobq.store.sql.outcomes`), a migration's and an
operation's in :mod:`jobq.store.sql.migrations` and :mod:`jobq.store.sql.operations`,
a session's counter slot in :mod:`jobq.store.sql.counters`.
"""

from __future__ import annotations

# DATABASE_NOW: the database's clock, which slots are computed against (in the caller's
# transaction: the now() its next statements see).
DATABASE_NOW = "SELECT now()"

# DATABASE_PING: the database answers (readiness); touches no table.
DATABASE_PING = "SELECT 1"

# WAKE_CHANNEL_GET: the channel that wakes idle workers ('<queue> <jobs>'), as the
# schema names it (jobq_wake_channel(), migration 0014): the one place the listener and
# jobq_wake both read it. Pure: no table, no lock.
WAKE_CHANNEL_GET = "SELECT jobq_wake_channel()"

# HAND_CHANNEL_GET: the channel of the jobs handed to waiting workers ('<job id> <lease>
# <worker id>', schema 28), the wake-up channel's name followed by '.hand'.
HAND_CHANNEL_GET = "SELECT jobq_hand_channel()"

# CONTROL_CHANNEL_GET: the channel of operators' actions ('cancel <id>', 'pause <queue>',
# ...), as the schema names it (jobq_control_channel(), migration 0018: 'jobq_control',
# or derived from JOBQ_SCHEMA). Pure: no table, no lock.
CONTROL_CHANNEL_GET = "SELECT jobq_control_channel()"

# SESSION_SETTING_SWAP: a setting's value in this session (NULL if never set), and jobq's
# put in its place (a SET: undone by a rollback of the transaction it ran in). No table,
# no lock.
SESSION_SETTING_SWAP = "SELECT current_setting(%(name)s, true), set_config(%(name)s, %(value)s, false)"

# SESSION_SETTING_RESTORE: the setting back as SESSION_SETTING_SWAP read it.
SESSION_SETTING_RESTORE = "SELECT set_config(%(name)s, %(previous)s, false)"

# LEADER_TRY_LOCK: the maintenance leader's session lock (reserved key); held for as
# long as its connection lives.
LEADER_TRY_LOCK = "SELECT pg_try_advisory_lock(%(key)s)"

# ADVISORY_LOCK_LIST_OF_NAMESPACE: jobq's advisory locks held now in this database (pg_locks
# shows a bigint key as classid, the high 32 bits, and objid, the low 32), with their
# sessions. pg_locks lists every database of the server: advisory locks are per database,
# so another database's jobq (a shared server) holds keys of the same namespace.
ADVISORY_LOCK_LIST_OF_NAMESPACE = (
    "SELECT ((l.classid::bigint << 32) | l.objid::bigint) & %(mask)s, l.pid, a.application_name "
    "FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND (l.classid::bigint >> 16) = %(namespace)s "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "ORDER BY 1"
)
