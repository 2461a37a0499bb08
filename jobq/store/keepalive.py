"""What jobq asks of libpq and of the server so that a connection whose other end
vanished without a word (a host lost, a network path cut) is ended on both sides: TCP
keepalives and ``tcp_user_timeout``, from JOBQ_DEAD_CONNECTION_TIMEOUT.

The two sides are asked for different times. The client gives up after the timeout; a
worker whose claim session has been dead that long stops its running handlers and kills
them after JOBQ_CANCEL_GRACE (:mod:`jobq.daemon.worker.lifeline`). The server waits
longer (:func:`server_dead_connection_timeout`: the timeout, plus the grace, plus
SERVER_MARGIN) before it ends the session and frees its advisory locks, so a job cut
off with its worker is claimed elsewhere only once its first run is over. Pure
functions: they read a URL and the settings, and open nothing.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from jobq import settings
from jobq.store.options import with_option

KEEPALIVE_PROBES = 3  # unanswered keepalive probes after which a connection is dead
# What the server waits beyond a worker's own stop of its handlers (JOBQ_DEAD_CONNECTION_TIMEOUT,
# then JOBQ_CANCEL_GRACE) before it ends a silent session: the worker's scheduling on a
# loaded host, and its kill (server_dead_connection_timeout).
SERVER_MARGIN = 5.0
# PostgreSQL 14+, and a server platform that can report a closed socket (not Windows).
CHECK_INTERVAL = "client_connection_check_interval"


def server_dead_connection_timeout(timeout: float) -> float:
    """How long the server waits for a silent client of ours before it ends its session
    (and frees its advisory locks): ``timeout`` (JOBQ_DEAD_CONNECTION_TIMEOUT, when a
    worker cut off stops its handlers) plus JOBQ_CANCEL_GRACE (when it kills the ones
    that did not return) plus SERVER_MARGIN; 0 when ``timeout`` is 0."""
    return timeout + settings.current().cancel_grace + SERVER_MARGIN if timeout > 0 else 0.0


def dead_connection_parameters(url: str, timeout: float, server_timeout: float | None = None) -> dict[str, int | str]:
    """libpq parameters that end a connection whose other end vanished (no FIN, no
    reset: a lost host, a cut network path) within about ``timeout`` seconds on the
    client, ``server_timeout`` (by default ``timeout``) on the server; none for
    ``timeout`` 0. Pure: reads ``url`` (and PGOPTIONS), opens nothing.

    - The client (libpq): TCP keepalives, a first probe after ``timeout / 3`` s idle,
      then one every ``timeout / 6`` s (whole seconds, at least 1), dead after
      KEEPALIVE_PROBES; and ``tcp_user_timeout``, data unacknowledged for ``timeout``.
    - The server, through ``options`` (``-c name=value``): the session's own
      ``tcp_keepalives_idle``, ``_interval``, ``_count`` and ``tcp_user_timeout``, the
      same rule for ``server_timeout``, so that the server ends the vanished session and
      frees its advisory locks; and ``client_connection_check_interval`` (the client's
      probe interval), so that a statement running for a closed client is cancelled.

    On Linux ``tcp_user_timeout`` also bounds the keepalive probing, so a silent peer
    is dropped ``timeout`` s (rounded up to a probe) after the last thing it sent; by
    the probes alone, after ``timeout / 3 + 3 × timeout / 6``. Over a Unix socket
    client and server ignore the TCP settings. A parameter that ``url`` sets wins;
    its own ``options`` (else PGOPTIONS) are kept after ours, so they win there too.
    """
    if timeout <= 0:
        return {}
    idle, interval, user_timeout_ms = _keepalive(timeout)
    given = conninfo_to_dict(url)
    client: dict[str, int | str] = {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": KEEPALIVE_PROBES,
        "tcp_user_timeout": user_timeout_ms,
    }
    parameters = {name: value for name, value in client.items() if name not in given}
    server_idle, server_interval, server_user_timeout_ms = _keepalive(server_timeout or timeout)
    server = {
        "tcp_keepalives_idle": server_idle,
        "tcp_keepalives_interval": server_interval,
        "tcp_keepalives_count": KEEPALIVE_PROBES,
        "tcp_user_timeout": server_user_timeout_ms,
        CHECK_INTERVAL: interval * 1000,
    }
    return with_option(url, parameters, " ".join(f"-c {name}={value}" for name, value in server.items()))


def _keepalive(timeout: float) -> tuple[int, int, int]:
    """Keepalive idle and interval (whole seconds, at least 1) and tcp_user_timeout (ms)
    that drop a silent peer within about ``timeout`` seconds."""
    return max(1, int(timeout / 3)), max(1, int(timeout / 6)), int(timeout * 1000)

