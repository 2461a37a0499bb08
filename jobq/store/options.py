"""Settings of a jobq session that travel in libpq's ``options`` (``-c name=value``):
a statement timeout, and the ``search_path`` of ``JOBQ_SCHEMA``.

Pure: each function reads the URL (and PGOPTIONS) and returns libpq parameters; none
opens anything. What the URL's own ``options`` (else PGOPTIONS) say is kept after ours,
so it wins.
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict


def with_statement_timeout(url: str, parameters: dict[str, int | str], seconds: float) -> dict[str, int | str]:
    """``parameters`` (libpq's, as :func:`jobq.store.keepalive.dead_connection_parameters`
    makes them for ``url``) with the session's ``statement_timeout`` set to ``seconds``
    (rounded to whole milliseconds, at least 1).

    A statement that runs longer is cancelled by the server (``QueryCanceled``), and
    rolled back: in autocommit the timer stops before the statement's commit begins.
    """
    return with_option(url, parameters, f"-c statement_timeout={max(1, round(seconds * 1000))}")


def with_search_path(url: str, parameters: dict[str, int | str], schema: str | None) -> dict[str, int | str]:
    """``parameters`` with the session's ``search_path`` set to ``schema`` alone (None:
    unchanged, the server's and the role's default, as before JOBQ_SCHEMA): every name
    jobq's statements spell unqualified is then jobq's own, in that schema.
    ``schema`` is a plain lower-case identifier (:class:`jobq.settings.Settings` checks
    it), so it needs no quoting."""
    if schema is None:
        return parameters
    return with_option(url, parameters, f"-c search_path={schema}")


def with_option(url: str, parameters: dict[str, int | str], ours: str) -> dict[str, int | str]:
    """``parameters`` with ``ours`` (``-c name=value ...``) in ``options``, before the
    options already there, else the URL's own, else PGOPTIONS: theirs win."""
    theirs = parameters.get("options", conninfo_to_dict(url).get("options", os.environ.get("PGOPTIONS", "")))
    return {**parameters, "options": f"{ours} {theirs}".strip()}
