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
from collections.abc import Mapping
from typing import Annotated, Literal

import zlib

import pydantic
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
# A running job's handler that has not returned this long after its cancel (it is
# inside C code, or ignores jobq.Cancelled) is stopped by killing its worker.
DEFAULT_CANCEL_GRACE = 10.0
DEFAULT_MAX_JOBS_PER_CHILD = 0
DEFAULT_MAX_SNOOZES = 100  # past this, a job's snooze is a failed run
# Missed slots a schedule with catch_up="all" enqueues at most (the latest ones).
DEFAULT_CATCH_UP_MAX = 100
DEFAULT_CLAIM_BATCH = 50
# A connection whose other end vanished without a word (a host lost, a network path cut)
# is ended on both sides within about this long: keepalives and tcp_user_timeout (jobq.store.connections).
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

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Names = tuple[str, ...]


def _split_names(value: object) -> object:
    """``"a, b,,c"`` -> ``("a", "b", "c")``; other types pass through to validation."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class Settings(BaseModel):
    """Every knob of jobq. Build it with :meth:`from_env`; field ``x`` is ``JOBQ_X`` (``db_schema``: ``JOBQ_SCHEMA``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str | None = None
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)

    handlers: Names = ()
    # JOBQ_SCHEMA (`schema` is pydantic's own name): every jobq object in this schema; None: the connection's default, as before (see
    # schema_namespace for the advisory namespace it implies).
    db_schema: str | None = Field(None, pattern=SCHEMA_PATTERN, max_length=MAX_SCHEMA_LENGTH)
    advisory_namespace: int = Field(DEFAULT_ADVISORY_NAMESPACE, ge=0, le=0xFFFF)

    backoff_base: Seconds = DEFAULT_BACKOFF_BASE
    backoff_cap: Seconds = DEFAULT_BACKOFF_CAP
    backoff_jitter: float = Field(DEFAULT_BACKOFF_JITTER, ge=0, le=1)

    concurrency: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=512)
    # Names this supervisor's host in worker ids (host:pid:token), in workers.hostname and
    # in its sessions' application_name: one word, so that log lines stay key=value.
    hostname: str = Field(default_factory=socket.gethostname, pattern=r"^\S+$", max_length=255)
    queues: Names = DEFAULT_QUEUES
    poll_interval: Seconds = DEFAULT_POLL_INTERVAL
    heartbeat_interval: Seconds = DEFAULT_HEARTBEAT_INTERVAL
    reaper_interval: Seconds = DEFAULT_REAPER_INTERVAL
    stale_threshold: Seconds = DEFAULT_STALE_THRESHOLD
    job_timeout: Seconds = DEFAULT_JOB_TIMEOUT
    graceful_timeout: NonNegativeSeconds = DEFAULT_GRACEFUL_TIMEOUT
    cancel_grace: NonNegativeSeconds = DEFAULT_CANCEL_GRACE
    max_jobs_per_child: int = Field(DEFAULT_MAX_JOBS_PER_CHILD, ge=0)
    max_snoozes: int = Field(DEFAULT_MAX_SNOOZES, ge=0)
    catch_up_max: int = Field(DEFAULT_CATCH_UP_MAX, ge=1, le=100_000)
    claim_batch: int = Field(DEFAULT_CLAIM_BATCH, ge=1, le=1000)
    dead_connection_timeout: NonNegativeSeconds = DEFAULT_DEAD_CONNECTION_TIMEOUT  # 0: off

    retention: NonNegativeSeconds = DEFAULT_RETENTION
    audit_retention: NonNegativeSeconds = DEFAULT_AUDIT_RETENTION  # 0: keep the audit trail for ever
    partition_interval: float = Field(DEFAULT_PARTITION_INTERVAL, ge=MIN_PARTITION_INTERVAL, allow_inf_nan=False)
    dead_letter_retention: NonNegativeSeconds = DEFAULT_DEAD_LETTER_RETENTION  # 0: until replayed or discarded
    sample_retention: float = Field(DEFAULT_SAMPLE_RETENTION, ge=DEFAULT_SAMPLE_RETENTION, allow_inf_nan=False)
    rollup_retention: float = Field(DEFAULT_ROLLUP_RETENTION, ge=MIN_ROLLUP_RETENTION, allow_inf_nan=False)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    api_token: str | None = None
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    max_pending: int | None = Field(None, ge=0)
    api_statement_timeout: NonNegativeSeconds = DEFAULT_API_STATEMENT_TIMEOUT  # 0: the server's own

    # The web dashboard (web/dashboard): full (default), readonly (no actions), off (no routes).
    dashboard: Literal["full", "readonly", "off"] = "full"
    # True: the dashboard shows no job payload or result anywhere.
    dashboard_hide_payloads: bool = False
    # Signs the dashboard's session cookie; unset: derived from JOBQ_API_TOKEN (or, without
    # a token, from the database's audit key), the same in every process.
    secret_key: str | None = Field(None, min_length=16)

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
            raise ConfigError("DATABASE_URL", "is not set; point it at your PostgreSQL database")
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
    return ConfigError(variable, f"{first['msg']}{shown}")


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
    # A fork taken while another thread held the lock would leave it held for ever in
    # the child; the child has only the forking thread, so a new lock is safe.
    global _current_lock
    _current_lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_in_child)
