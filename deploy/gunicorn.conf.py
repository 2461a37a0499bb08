"""Gunicorn settings for the jobq API (the Procfile's ``web:`` line).

    gunicorn -c deploy/gunicorn.conf.py 'web.app:create_app()'

Configuration comes from the environment: ``PORT`` (default 8000), ``WEB_CONCURRENCY``
(worker processes, default two per core) and jobq's own ``JOBQ_*`` and
``DATABASE_URL``, read and validated here (:func:`jobq.settings.current`) before any
worker starts; the preloaded app is built from the same read. Anything Gunicorn accepts
can still be added with ``GUNICORN_CMD_ARGS``, except jobq's variables through Gunicorn's
``--env``: it sets them after this file has read them, so start-up stops naming them.
"""

import os
import sys

import jobq.settings
from jobq import logs
from jobq.errors import ConfigError
from jobq.settings import EXIT_CONFIG, Settings, variable_name

try:
    settings = jobq.settings.current()
except ConfigError as exc:
    # A bad variable stops start-up with one line naming it, before any worker is forked
    # (raised, Gunicorn would print its own traceback around it).
    print(f"jobq: {exc}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)

bind = f"0.0.0.0:{settings.port}"
workers = int(os.environ.get("WEB_CONCURRENCY") or 2 * (os.cpu_count() or 1))
# Threads let a worker overlap one request's database round trips with another's
# parsing and encoding, and keep connections alive between requests; each worker's
# pool has as many connections as it has threads (web/pool.py).
worker_class = "gthread"
threads = 8
keepalive = 5  # seconds an idle keep-alive connection is held

# A request is bounded by the pool's timeout (503 after 3 s without a connection);
# a worker silent for this long is killed and replaced.
timeout = 30
graceful_timeout = 25  # platforms allow 30 s between SIGTERM and SIGKILL

# Build the app once, before forking: a configuration error stops the master with one
# message instead of failing in every worker. The app opens no connection when built;
# each worker opens its own pool on its first request.
preload_app = True

# Access lines on stdout: client, method, path without its query string, status, size,
# milliseconds. The logger offers no other value (web/access_log.py), so no header (the
# Authorization token) or query string can be printed, whatever the format says.
accesslog = "-"
logger_class = "web.access_log.AccessLogger"
access_log_format = '%(h)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms'
errorlog = "-"
loglevel = settings.log_level.lower()

# No runtime control socket: its default path is per user, not per app, so two servers
# on one host would share it; signals (TERM, HUP, TTIN/TTOU) manage the arbiter.
control_socket_disable = True

if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"  # heartbeat files in memory, not on a possibly slow disk


JOBQ_VARIABLES = frozenset(variable_name(field) for field in Settings.model_fields)


def on_starting(server):
    """The app's own log lines (jobq and web loggers) go to stderr like Gunicorn's error log."""
    refuse_jobq_variables_from_gunicorn_env(server.cfg)
    logs.configure(log_format=settings.log_format, level=settings.log_level)


def refuse_jobq_variables_from_gunicorn_env(cfg):
    """Raise RuntimeError (Gunicorn prints it and exits 1) naming a jobq variable that
    Gunicorn's ``--env`` sets to a value the environment did not have: Gunicorn applies
    ``--env`` after this file has read the settings the app is built from, so it would
    be ignored (a token given that way would guard nothing)."""
    for name, value in sorted(cfg.env.items()):
        if name in JOBQ_VARIABLES and cfg.env_orig.get(name) != value:
            raise RuntimeError(
                f"{name}: set it in the environment Gunicorn starts in, not with --env "
                "(jobq reads its settings once, before Gunicorn applies --env)"
            )
