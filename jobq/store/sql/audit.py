"""The audit log of operators' actions (jobq_audit), and the key that API actors are an
HMAC under (jobq_keys).

Run by :mod:`jobq.jobs.audit` (recording and listing actions, and the pruning that the
maintenance leader asks of it).
"""

from __future__ import annotations

# AUDIT_INSERT: one operator action; no lock beyond the new row.
AUDIT_INSERT = (
    "INSERT INTO jobq_audit (actor, action, target, counts) "
    "VALUES (%(actor)s, %(action)s, %(target)s::jsonb, %(counts)s::jsonb) RETURNING id"
)

# AUDIT_LIST: newest first (jobq_audit_at_idx), keyset: rows older than %(before)s (an
# id; NULL for the first page).
AUDIT_LIST = (
    "SELECT id, at, actor, action, target, counts FROM jobq_audit "
    "WHERE %(before)s::bigint IS NULL OR id < %(before)s ORDER BY at DESC, id DESC LIMIT %(limit)s"
)

# AUDIT_DELETE_BEFORE: the leader's pruning of rows older than JOBQ_AUDIT_RETENTION, a
# batch at a time (jobq_audit_at_idx).
AUDIT_DELETE_BEFORE = (
    "DELETE FROM jobq_audit WHERE id IN (SELECT id FROM jobq_audit "
    "WHERE at < now() - make_interval(secs => %(older_than)s) ORDER BY at LIMIT %(batch)s)"
)

# AUDIT_KEY_GET: the server-side key that API actors are an HMAC under (a table of one row).
AUDIT_KEY_GET = "SELECT key FROM jobq_keys WHERE name = 'audit'"
