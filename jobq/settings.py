"""Configuration: read once from the environment, validated, frozen, passed down.

A process reads it through :func:`current` (the first call reads the environment, every
later one returns the same :class:`Settings`); :func:`reset` makes the next call read
again. A forked child keeps its parent's settings, as it keeps its environment.

Every variable has the ``JOBQ_`` prefix except the platform ones (``DATABASE_URL``,
``PORT``, ``WEB_CONCURRENCY``). Durations are seconds. A bad value raises
:class:`jobq.errors.ConfigError` naming the variable; ``jobq`` commands print it
and exit non-zero before starting anything.
"""

from __future__ import annotations

import os
import socket
import threading
import zlib
from collections.abc import Mapping
from typing import Annotated, Literal

import psycopg
import pydantic
from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobq.handlers.backoff import retry_delay
from jobq.errors import ConfigError

ENV_PREFIX = "JOBQ_"

DEFAULT_ADVISORY_NAMESPACE = 0x6A71  # "jq": the high 16 bits of every jobq advisory lock key
# JOBQ_SCHEMA: a plain lower-case identifier (no quoting anywhere), short enough that the
# channels derived from it ('jobq_control.<schema>') fit PostgreSQL's 63-byte names.
SCHEMA_PATTERN = r"^[a-z_][a-z0-9_]*$"
MAX_SCHEMA_LENGTH = 48
DEFAULT_SCHEMA = "public"  # JOBQ_SCHEMA=public is the same install as JOBQ_SCHEMA unset
DEFAULT_BACKOFF_BASE = 5.0
DEFAULT_BACKOFF_CAP = 3600.0
DEFAULT_BACKOFF_JITTER = 0.10
DEFAULT_QUEUES = ("default",)
DEFAULT_POLL_INTERVAL = 5.0
DEFAULT_HEARTBEAT_INTERVAL = 10.0
DEFAULT_REAPER_INTERVAL = 15.0
DEFAULT_STALE_THRESHOLD = 30.0
DEFAULT_JOB_TIMEOUT = 1800.0
DEFAULT_GRACEFUL_TIMEOUT = 25.0
DEFAULT_CANCEL_GRACE = 10.0
DEFAULT_MAX_JOBS_PER_CHILD = 0
DEFAULT_MAX_SNOOZES = 100  # past this, a job's snooze is a failed run
DEFAULT_CATCH_UP_MAX = 100  # missed slots a schedule with catch_up="all" enqueues at most (the latest ones)
DEFAULT_CLAIM_BATCH = 1000
DEFAULT_DEAD_CONNECTION_TIMEOUT = 30.0
MIN_DEAD_CONNECTION_TIMEOUT = 1.0  # keepalive timers count whole seconds
DEFAULT_RETENTION = 7 * 24 * 3600.0
DEFAULT_AUDIT_RETENTION = 90 * 24 * 3600.0
# Finished jobs live in partitions this long each (jobq.store.partitions): retention drops a
# partition whole once all of it is older than JOBQ_RETENTION.
DEFAULT_PARTITION_INTERVAL = 24 * 3600.0
MIN_PARTITION_INTERVAL = 1.0
# Partitions retention keeps at most (a GET /jobs/{id} probes each one's index on id).
MAX_RETAINED_PARTITIONS = 1000
DEFAULT_DEAD_LETTER_RETENTION = 0.0  # dead letters stay until replayed or discarded
# Counter samples (jobq.observe.samples): the longest trailing window of the metrics is
# a quarter of an hour.
DEFAULT_SAMPLE_RETENTION = 900.0
# The per-minute rollup (jobq.observe.rollup) is kept this long: the dashboard's longest window
# is a day, and a second day lets it show yesterday's same hour.
DEFAULT_ROLLUP_RETENTION = 2 * 24 * 3600.0
MIN_ROLLUP_RETENTION = 24 * 3600.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# A statement of the API's that runs longer (a lock it waits for, a stuck server) is
# cancelled and the request answers 503: well under Gunicorn's 30 s, far above what a
# healthy statement of the API's takes.
DEFAULT_API_STATEMENT_TIMEOUT = 5.0
DEFAULT_PORT = 8000
# The exit code of a process that stops at start-up on a bad configuration value (the
# jobq command, its supervisor, Gunicorn's config): the same as a command-line usage error.
EXIT_CONFIG = 2

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Names = tuple[str, ...]


def _split_names(value: object) -> object:
    """``"a, b,,c"`` -> ``("a", "b", "c")``; other types pass through to validation."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _cpu_count() -> int:
    """the CPU count"""
    return os.cpu_count() or 1


def _hostname() -> str:
    """the machine's host name"""
    return socket.gethostname()


class Settings(BaseModel):
    """Every knob of jobq. Build it with :meth:`from_env`; field ``x`` is ``JOBQ_X``
    (``db_schema``: ``JOBQ_SCHEMA``).

    Each field's docstring is its row in the documentation's configuration table
    (``tools/settings_table.py`` writes it; a test checks the page is current)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    database_url: str | None = None
    """PostgreSQL URL (libpq syntax), parsed at start-up: a malformed one stops the
    process with one line naming it (exit 2). Required by every process; the `jobq`
    commands run in a checkout where `make run` is going use its embedded server when it
    is unset (and say so on stderr)."""
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    """The API's port (Gunicorn binds `0.0.0.0:$PORT`)."""

    handlers: Names = ()
    """Comma-separated modules imported by workers (your `@jobq.register` handlers)."""
    db_schema: str | None = Field(None, pattern=SCHEMA_PATTERN, max_length=MAX_SCHEMA_LENGTH)
    """Every jobq table, function, trigger and sequence in this schema (a lower-case
    identifier); two schemas in one database are two independent installs, their
    advisory namespaces and NOTIFY channels derived from the schema. Unset: the
    connection's default schema, as before."""
    advisory_namespace: int = Field(DEFAULT_ADVISORY_NAMESPACE, ge=0, le=0xFFFF)
    """High 16 bits of jobq's advisory lock keys (`27249` is `0x6A71`). Unset with a
    `JOBQ_SCHEMA` other than `public`: 16 bits of a CRC of the schema's name."""

    backoff_base: Seconds = DEFAULT_BACKOFF_BASE
    """Delay after the first failed run; doubles with each attempt."""
    backoff_cap: Seconds = DEFAULT_BACKOFF_CAP
    """Longest delay between two runs."""
    backoff_jitter: float = Field(DEFAULT_BACKOFF_JITTER, ge=0, le=1)
    """Random spread of delays (0.1: ±10 %)."""

    concurrency: int = Field(default_factory=_cpu_count, ge=1, le=512)
    """Worker processes per supervisor at most (`jobq worker --concurrency`)."""
    min_workers: int = Field(default_factory=_cpu_count, ge=1, le=512)
    """Workers a supervisor keeps however idle (`--min-workers`); it starts more, up to the concurrency, while all are
    busy and their jobs wait (on I/O, a lock) or run long, and lets them go a minute after that. Equal: a fixed pool."""
    hostname: str = Field(default_factory=_hostname, pattern=r"^\S+$", max_length=255)
    """Names a supervisor's host in its worker ids (`host:pid:token`), in `workers.hostname` and in its sessions'
    `application_name`; one word. Set it where containers share a host name or where the platform's is meaningless
    (a Heroku dyno's is a random id: `worker: JOBQ_HOSTNAME=$DYNO jobq worker` in the Procfile names it `worker.1`,
    `worker.2`...)."""
    queues: Names = DEFAULT_QUEUES
    """Comma-separated queues a supervisor's workers take jobs from (`--queues`)."""
    all_queues: bool = False
    """`1`: the workers take jobs from every queue that has jobs, queues created later
    too, pauses and priorities honoured (`jobq worker --all-queues`; `make run`'s
    default). For small deployments; not with `JOBQ_QUEUES`."""
    poll_interval: Seconds = DEFAULT_POLL_INTERVAL
    """An idle worker's longest wait without a notification."""
    heartbeat_interval: Seconds = DEFAULT_HEARTBEAT_INTERVAL
    """Between two heartbeats of a worker and its jobs."""
    reaper_interval: Seconds = DEFAULT_REAPER_INTERVAL
    """Between two passes of the stale reaper (and retention)."""
    stale_threshold: Seconds = DEFAULT_STALE_THRESHOLD
    """Heartbeat age after which a job whose session is gone is taken back; must exceed
    the heartbeat interval."""
    job_timeout: Seconds = DEFAULT_JOB_TIMEOUT
    """A job's time limit unless its handler sets one; past it the worker is killed."""
    graceful_timeout: NonNegativeSeconds = DEFAULT_GRACEFUL_TIMEOUT
    """How long running jobs get to finish at shutdown (under Heroku's 30 s)."""
    cancel_grace: NonNegativeSeconds = DEFAULT_CANCEL_GRACE
    """How long a cancelled running job's handler has to return (it may be inside C code,
    or ignore `jobq.Cancelled`) before its worker is killed."""
    max_jobs_per_child: int = Field(DEFAULT_MAX_JOBS_PER_CHILD, ge=0)
    """Recycle a worker after this many jobs (0: never)."""
    max_snoozes: int = Field(DEFAULT_MAX_SNOOZES, ge=0)
    """Snoozes a job may take (`jobq.Snooze`); past this a snooze is a failed run."""
    catch_up_max: int = Field(DEFAULT_CATCH_UP_MAX, ge=1, le=100_000)
    """Missed slots a `catch_up="all"` schedule enqueues at most (the latest)."""
    claim_batch: int = Field(DEFAULT_CLAIM_BATCH, ge=1, le=1000)
    """Most jobs a worker claims in one round trip while jobs are short."""
    short_job_workers: int = Field(default_factory=_cpu_count, ge=0, le=512)
    """Most of a supervisor's workers that run batches of short CPU-bound jobs at once (more would only share the
    cores); the others wait their turn. Workers whose jobs are long or wait on I/O are not held back. 0: no limit."""
    hand_off: bool = True
    """A worker whose claim found nothing is handed the next job of its queues by its enqueue, claimed for it in the
    enqueue's transaction (`jobq.enqueue` of one job due now, without a concurrency key, of a queue neither paused
    nor limited, outside a caller's transaction). 0: this worker always claims."""
    dead_connection_timeout: NonNegativeSeconds = DEFAULT_DEAD_CONNECTION_TIMEOUT  # 0: off
    """A connection whose other end vanished without a word is ended by jobq within about this long (keepalive probes
    after a third of it idle, then every sixth; `tcp_user_timeout` of all of it), and a worker whose database
    connection has been dead this long stops its running handlers (killed after `JOBQ_CANCEL_GRACE`); the server is
    asked to end it after this + `JOBQ_CANCEL_GRACE` + 5 s, so that a job is taken back only once its handler has
    stopped. At least 1, or 0 for the system defaults."""

    retention: NonNegativeSeconds = DEFAULT_RETENTION
    """Finished (done, dead, cancelled) jobs older than this go: their partition is dropped once all of it is older, so
    a job stays up to one `JOBQ_PARTITION_INTERVAL` longer; 0 keeps everything. Dead letters stay."""
    audit_retention: NonNegativeSeconds = DEFAULT_AUDIT_RETENTION  # 0: keep the audit trail for ever
    """Audit rows older than this (90 days) are deleted by the maintenance leader; 0
    keeps them all."""
    partition_interval: float = Field(DEFAULT_PARTITION_INTERVAL, ge=MIN_PARTITION_INTERVAL, allow_inf_nan=False)
    """The time range of each partition of finished jobs (a day), made ahead by the maintenance leader; at least 1."""
    dead_letter_retention: NonNegativeSeconds = DEFAULT_DEAD_LETTER_RETENTION  # 0: until replayed or discarded
    """Dead letters (replayed or not) older than this are deleted by the maintenance leader; 0 keeps them until
    replayed or discarded."""
    sample_retention: float = Field(DEFAULT_SAMPLE_RETENTION, ge=DEFAULT_SAMPLE_RETENTION, allow_inf_nan=False)
    """Samples of the counters behind the trailing-window metrics are kept this long; at least 900, the longest window."""
    rollup_retention: float = Field(DEFAULT_ROLLUP_RETENTION, ge=MIN_ROLLUP_RETENTION, allow_inf_nan=False)
    """Minutes of the per-minute history (`GET /stats`) older than this (2 days) are
    deleted by the maintenance leader; at least 86400, the longest window."""
    log_format: Literal["text", "json"] = "text"
    """`text`, or `json` for one JSON object per line."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """`DEBUG`, `INFO`, `WARNING` or `ERROR`."""

    api_token: str | None = None
    """When set, every route but `/health`, `/` and the dashboard's (which ask for it in
    a login form) requires `Authorization: Bearer <token>`."""
    unknown_types: Literal["accept", "reject"] = "accept"
    """A job type no live worker has a handler for (workers announce theirs): `accept` (the web may deploy before the
    workers; `jobq inspect` shows such jobs as "no handler") or `reject` (`POST /jobs` answers 422 naming the known
    types; `jobq enqueue` refuses). Nothing is refused while no worker is live or one of an older release is."""
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    """Largest request body the API accepts (413 above)."""
    max_pending: int | None = Field(None, ge=0)
    """Admission control: `POST /jobs` answers 429 while more jobs than this are pending."""
    api_statement_timeout: NonNegativeSeconds = DEFAULT_API_STATEMENT_TIMEOUT  # 0: the server's own
    """An API statement running longer (waiting on a lock, a stuck server) is cancelled
    and the request answers 503; 0 leaves the server's `statement_timeout`."""

    dashboard: Literal["full", "readonly", "off"] = "full"
    """The web dashboard: `full` (pages and actions), `readonly` (pages only: the action
    routes do not exist) or `off` (no dashboard route; `/` answers 404)."""
    dashboard_hide_payloads: bool = False
    """`1`: the dashboard shows no job payload or result anywhere."""
    secret_key: str | None = Field(None, min_length=16)
    """Signs the dashboard's login cookie (at least 16 characters); unset, it is derived
    from `JOBQ_API_TOKEN` (or, without a token, from the database's audit key), the same
    in every process."""

    @field_validator("database_url")
    @classmethod
    def _parses_as_conninfo(cls, value: str | None) -> str | None:
        """Parsed as libpq would, before anything connects or forks: a typo stops start-up
        with one line, not a crash loop of children that each fail to connect."""
        if value is not None:
            try:
                conninfo_to_dict(value)
            except psycopg.ProgrammingError as exc:
                # psycopg quotes what it could not parse: the whole value (maybe with a
                # password) is never repeated, a parameter's name is.
                reason = str(exc).strip().replace(f'"{value}"', "the value")
                raise ValueError(f"is not a PostgreSQL URL (postgresql://user@host:5432/dbname) "
                                 f"or key=value connection string: {reason}") from None
        return value

    @field_validator("handlers", "queues", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        return _split_names(value)

    @field_validator("queues")
    @classmethod
    def _at_least_one_queue(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("name at least one queue")
        return value

    @field_validator("dead_connection_timeout")
    @classmethod
    def _whole_keepalive_seconds(cls, value: float) -> float:
        if 0 < value < MIN_DEAD_CONNECTION_TIMEOUT:
            raise ValueError(f"must be 0 (off) or at least {MIN_DEAD_CONNECTION_TIMEOUT:g} s")
        return value

    def retry_delay(self, attempt: int) -> float:
        """Seconds before the next run after failed run ``attempt``, by this backoff policy."""
        return retry_delay(attempt, base=self.backoff_base, cap=self.backoff_cap, jitter=self.backoff_jitter)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read the environment (``os.environ`` by default); ``overrides`` (by field name) win.

        Raises :class:`ConfigError` naming the first bad variable.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in cls.model_fields:
            raw = env.get(variable_name(field))
            # An empty value means unset (a Procfile or .env line like JOBQ_MAX_PENDING=).
            if raw is not None and raw.strip() != "":
                values[field] = raw.strip()
        values.update(overrides)
        if values.get("db_schema") is not None and "advisory_namespace" not in values:
            values["advisory_namespace"] = schema_namespace(str(values["db_schema"]))
        try:
            settings = cls.model_validate(values)
        except pydantic.ValidationError as exc:
            raise _config_error(exc) from None
        if settings.all_queues and "queues" in values:
            raise ConfigError("JOBQ_ALL_QUEUES", "is set with JOBQ_QUEUES (--queues): serve every queue or name them")
        if settings.stale_threshold <= settings.heartbeat_interval:
            raise ConfigError(
                "JOBQ_STALE_THRESHOLD",
                f"must be longer than JOBQ_HEARTBEAT_INTERVAL ({settings.heartbeat_interval:g} s)",
            )
        if settings.retention / settings.partition_interval > MAX_RETAINED_PARTITIONS:
            raise ConfigError(
                "JOBQ_PARTITION_INTERVAL",
                f"must be at least JOBQ_RETENTION / {MAX_RETAINED_PARTITIONS} "
                f"({settings.retention / MAX_RETAINED_PARTITIONS:g} s): every partition kept costs "
                "a lookup of a job by id one more probe",
            )
        return settings

    def require_database_url(self) -> str:
        """The database URL, or a ConfigError telling the user to set it."""
        if not self.database_url:
            raise ConfigError(
                "DATABASE_URL", "is not set; point it at your PostgreSQL database (or run make run, jobq dev, in this checkout)"
            )
        return self.database_url


def schema_namespace(schema: str) -> int:
    """The advisory namespace of the install in ``schema`` when JOBQ_ADVISORY_NAMESPACE
    does not say: the default one for ``public`` (an existing install, untouched), else 16
    bits of a CRC of the name, never the default, so that two installs in one database
    never share a lock (the migrations', the leader's, a job's). Two schemas whose names
    meet in those 16 bits (about one pair in 65,536) set JOBQ_ADVISORY_NAMESPACE."""
    if schema == DEFAULT_SCHEMA:
        return DEFAULT_ADVISORY_NAMESPACE
    derived = zlib.crc32(f"jobq schema {schema}".encode()) & 0xFFFF
    return derived ^ 1 if derived == DEFAULT_ADVISORY_NAMESPACE else derived


_ALIASED = {"database_url": "DATABASE_URL", "port": "PORT", "db_schema": "JOBQ_SCHEMA"}
_SECRETS = frozenset({"database_url", "api_token", "secret_key"})  # never quoted in an error


def variable_name(field: str) -> str:
    """The environment variable that sets ``field``."""
    return _ALIASED.get(field, ENV_PREFIX + field.upper())


def _config_error(exc: pydantic.ValidationError) -> ConfigError:
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    variable = variable_name(field) if field else "configuration"
    value = first.get("input")
    shown = f" (got {value!r})" if isinstance(value, (str, int, float)) and field not in _SECRETS else ""
    message = str(first["msg"]).removeprefix("Value error, ")  # a validator's own words
    return ConfigError(variable, f"{message}{shown}")


_current: Settings | None = None
_current_lock = threading.Lock()


def current() -> Settings:
    """This process's settings: read from the environment by the first call, then the
    same frozen object until :func:`reset`. Safe to call from any thread.

    Raises :class:`ConfigError` naming the first bad variable; nothing is kept then, so
    the next call reads the environment again.
    """
    global _current
    settings = _current
    if settings is None:
        with _current_lock:
            if _current is None:
                _current = Settings.from_env()
            settings = _current
    return settings


def adopt(settings: Settings) -> Settings:
    """Make ``settings`` what :func:`current` returns in this process (and the children it
    forks from now on): a command that read the environment itself, with its flags as
    overrides, reads it once, and library calls share that read. Returns ``settings``."""
    global _current
    with _current_lock:
        _current = settings
    return settings


def reset() -> None:
    """Forget the settings :func:`current` read: its next call reads the environment again
    (for tests that change it; a running process has no reason to)."""
    global _current
    with _current_lock:
        _current = None


def _unlock_in_child() -> None:
    # A fork while another thread held the lock leaves it held for ever in the child (only the forking thread): a new one.
    global _current_lock
    _current_lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_in_child)
