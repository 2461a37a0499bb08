"""What a new job may look like: one pydantic model shared by the library and the API.

:class:`JobSpec` validates ``enqueue`` arguments and ``POST /jobs`` bodies alike, so
that both accept and refuse exactly the same things, and the OpenAPI document is
generated from the rules that are enforced. Integers are strict (``True``, ``"7"``
and ``7.5`` are not integers); a payload is a JSON object that PostgreSQL's jsonb can
store (no NUL characters, no lone surrogates, no NaN or Infinity, bounded depth).

A batch (:func:`parse_rows`, what ``enqueue_many`` uses) is checked without a model per
job where it can be: a job given as a plain dict of plain values (``str``, ``int``,
``dict``, ``list``, ``datetime``, ``None``) within JobSpec's bounds is accepted as is;
any other job, and every bad one, is validated by JobSpec, so the same jobs are
accepted, with the same values, and the same errors raised.
"""

from __future__ import annotations

import json
import re
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from datetime import datetime, timezone
from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter, ValidationError, field_validator
from pydantic import ValidationInfo

from jobq.errors import InvalidArgument

MAX_TYPE_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_IDEMPOTENCY_KEY_LENGTH = 255
MAX_CONCURRENCY_KEY_LENGTH = 255
MAX_DEBOUNCE = 7 * 86_400  # seconds: a debounce (or its max wait) of at most a week
MAX_PAYLOAD_DEPTH = 64
MAX_TAGS = 20
MAX_TAG_LENGTH = 100

MIN_PRIORITY, MAX_PRIORITY = 1, 10
MAX_MAX_RETRIES = 10  # the most retries a job (or a handler's policy) may ask for

DEFAULT_PRIORITY = 5
DEFAULT_MAX_RETRIES = 3
DEFAULT_QUEUE = "default"
# How long an idempotency key keeps another job with the same key out by default
# (JobSpec.unique_while; migration 0008).
DEFAULT_UNIQUE_WHILE = "always"

Name = Annotated[StrictStr, Field(min_length=1)]
Tag = Annotated[StrictStr, Field(min_length=1, max_length=MAX_TAG_LENGTH)]


class JsonObject(dict):  # type: ignore[type-arg]
    """A validated payload: the dict, and the JSON text it was checked as (serialised
    once, at validation, and sent as is)."""

    __slots__ = ("json_text",)

    def __init__(self, value: dict[str, Any], json_text: str) -> None:
        super().__init__(value)
        self.json_text = json_text


class JobSpec(BaseModel):
    """A job to enqueue. ``run_at`` without an offset means UTC; ``None`` means now."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Annotated[Name, Field(max_length=MAX_TYPE_LENGTH, description="Handler name, e.g. `noop`.")]
    payload: dict[str, Any] = Field(
        default_factory=dict, validate_default=True, description="Any JSON object; the handler's input."
    )
    priority: Annotated[
        StrictInt, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, description="1-10, higher runs first.")
    ] = DEFAULT_PRIORITY
    max_retries: Annotated[
        StrictInt, Field(ge=0, le=MAX_MAX_RETRIES, description="Retries after the first run: 3 means up to 4 runs.")
    ] = DEFAULT_MAX_RETRIES
    run_at: datetime | None = Field(None, description="ISO-8601; without an offset it means UTC. Omit for now.")
    queue: Annotated[Name, Field(max_length=MAX_QUEUE_LENGTH)] = DEFAULT_QUEUE
    idempotency_key: Annotated[Name, Field(max_length=MAX_IDEMPOTENCY_KEY_LENGTH)] | None = None
    debounce: Annotated[float, Field(strict=True, gt=0, le=MAX_DEBOUNCE)] | None = Field(None, description=(
        "Seconds: while the job holding this idempotency_key is pending, an enqueue replaces its payload and moves "
        "its run_at to this long from now (200 with it). Implies unique_while `pending`; takes no run_at."))
    debounce_max_wait: Annotated[float, Field(strict=True, gt=0, le=MAX_DEBOUNCE)] | None = Field(
        None, description="Seconds: a debounced job's run_at never moves past this long after its first enqueue.")
    unique_while: Literal["pending", "active", "always"] | None = Field(
        None,
        description="How long the idempotency_key keeps another job with the same key out: `always` (the "
        "default: while this job's row exists), `active` (while it is pending, claimed or running) or "
        "`pending` (while it waits to run). Keys share one namespace, whatever their scope. Needs an "
        "idempotency_key.",
    )
    concurrency_key: Annotated[Name, Field(max_length=MAX_CONCURRENCY_KEY_LENGTH)] | None = Field(
        None,
        description="The key its limits count it under (`tenant:42`): rules on key patterns "
        "(`PUT /limits/tenant:*`) limit how many jobs of each key run at once, and how often they start.",
    )
    tags: list[Tag] | None = Field(
        None,
        max_length=MAX_TAGS,
        description=f"Up to {MAX_TAGS} labels of 1-{MAX_TAG_LENGTH} characters, each at most once, "
        "to find the job by (GET /jobs?tag=...). An empty list is no tags.",
    )

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_none_is_empty(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("payload")
    @classmethod
    def _payload_storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return JsonObject(value, storable_json(value))
        except TypeError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("type", "queue", "idempotency_key", "concurrency_key")
    @classmethod
    def _text_storable(cls, value: str | None) -> str | None:
        if value is not None:
            check_text(value)
        return value

    @field_validator("debounce", "debounce_max_wait", "unique_while")
    @classmethod
    def _debounced(cls, value: object, info: ValidationInfo) -> object:
        debounced = info.data.get("debounce") is not None
        if value is None or (info.field_name == "unique_while" and (not debounced or value == "pending")):
            return value
        if info.field_name == "debounce" and info.data.get("run_at") is not None:
            raise ValueError("takes no run_at: a debounced job runs `debounce` seconds after its latest enqueue")
        if info.field_name != "debounce" and not (info.field_name == "debounce_max_wait" and debounced):
            raise ValueError("needs a debounce" if info.field_name == "debounce_max_wait"
                             else "a debounced job's key is held while it is pending: unique_while must be 'pending'")
        return value

    @field_validator("tags")
    @classmethod
    def _tags_distinct_and_storable(cls, value: list[str] | None) -> list[str] | None:
        if not value:
            return None  # stored as NULL: jobs_tags_check wants 1-20 tags or none
        seen: dict[str, int] = {}
        for index, tag in enumerate(value):
            try:
                check_text(tag)
            except ValueError as exc:
                raise ValueError(f"tags[{index}] {exc}") from None
            if tag in seen:
                raise ValueError(f"tags[{index}] repeats tags[{seen[tag]}] ({tag!r})")
            seen[tag] = index
        return value

    @field_validator("run_at", mode="before")
    @classmethod
    def _run_at_is_a_time(cls, value: object) -> object:
        # Refuse numbers: pydantic would read them as Unix timestamps, which nobody means.
        if value is not None and not isinstance(value, (str, datetime)):
            raise ValueError("must be an ISO-8601 date-time")
        return value

    @field_validator("run_at")
    @classmethod
    def _run_at_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    def payload_json(self) -> str:
        """The payload as compact JSON text, ready for a jsonb parameter."""
        return self.payload.json_text  # type: ignore[attr-defined]

    def key_scope(self) -> str:
        """The scope its row stores: ``unique_while``, or the default. Raises
        :class:`InvalidArgument` for a scope given without a key (checked here, not when
        the model is validated: the API may take the key from a header). A debounced job's
        is ``"pending"``, and needs a key."""
        if self.debounce is not None:
            if self.idempotency_key is None:
                raise InvalidArgument("debounce", "needs an idempotency_key")
            return "pending"
        return key_scope(self.unique_while, self.idempotency_key)

    def row(self) -> Row:
        """The job as the inserts take it (see :data:`Row`)."""
        return (self.type, self.queue, self.payload, self.priority, self.max_retries, self.run_at,  # type: ignore[return-value]
                self.idempotency_key, self.tags, self.unique_while, self.concurrency_key)


# A validated job as jobq.jobs.submit inserts it: (type, queue, payload, priority, max_retries,
# run_at, idempotency_key, tags, unique_while, concurrency_key), payload a JsonObject, run_at in UTC or
# None (now), tags a list or None, unique_while as given (None: the default). A plain
# tuple: a batch of 1,000 is built and read in a few hundred microseconds.
Row = tuple[str, str, "JsonObject", int, int, datetime | None, str | None, list[str] | None, str | None, str | None]


def key_scope(unique_while: str | None, idempotency_key: str | None) -> str:
    """The scope a row stores (see :meth:`JobSpec.key_scope`); InvalidArgument for a
    scope without a key."""
    if unique_while is not None and idempotency_key is None:
        raise InvalidArgument("unique_while", "needs an idempotency_key")
    return unique_while or DEFAULT_UNIQUE_WHILE


def parse_spec(values: dict[str, Any], *, prefix: str = "") -> JobSpec:
    """Validate one job's keyword arguments; raise :class:`InvalidArgument` naming the field."""
    try:
        return JobSpec.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_name(first["loc"]) or "job"
        raise InvalidArgument(prefix + field, first["msg"]) from None


def storable_json(value: Any) -> str:
    """``value`` as compact JSON text that PostgreSQL's jsonb will take.

    Raises ValueError (or TypeError for what is not JSON at all) saying what is wrong: NaN or
    Infinity, a NUL character, a lone surrogate, nesting deeper than MAX_PAYLOAD_DEPTH."""
    if value is None:  # what most handlers return: no encoder made for it (about 1 µs a job)
        return "null"
    try:
        text = _encode(value)
    except ValueError as exc:
        raise ValueError("holds NaN or Infinity, which JSON cannot carry" if "JSON compliant" in str(exc) else str(exc)) from None
    # (The cheap tests first: most payloads have no "\u0000" at all, and are ASCII.)
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise ValueError("contains a NUL character, which PostgreSQL cannot store")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("contains a lone surrogate, which is not valid Unicode") from None
    # Nesting depth is at most the number of containers: walk only when that could exceed the limit.
    if text.count("{") + text.count("[") > MAX_PAYLOAD_DEPTH:
        _check_depth(value, 0)
    return text


# "\u0000" in JSON text is a NUL unless its backslash is itself escaped ("\\u0000").
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _encode(value: Any) -> str:
    """``_ENCODER.encode(value)``, calling the C encoder as JSONEncoder.encode does but
    without its Python layers (1.1 us instead of 1.7 for a two-key payload); a new
    encoder each time, so that its record of the containers being encoded (the
    circular-reference check) is never shared."""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return _ENCODER.encode(value)
    e = _ENCODER
    encoder = c_make_encoder({}, e.default, encode_basestring, None, e.key_separator, e.item_separator,
                             e.sort_keys, e.skipkeys, e.allow_nan)
    return "".join(encoder(value, 0))

_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _check_depth(value: Any, depth: int) -> None:
    if depth > MAX_PAYLOAD_DEPTH:
        raise ValueError(f"is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if isinstance(value, dict):
        for item in value.values():
            _check_depth(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_depth(item, depth + 1)


_SPEC_LIST = TypeAdapter(list[JobSpec])


def parse_specs(values: Iterable[Any], *, name: str = "jobs") -> list[JobSpec]:
    """Validate a list of jobs' keyword arguments at once; raise :class:`InvalidArgument`
    naming the first bad one as ``jobs[i].field``."""
    try:
        return _SPEC_LIST.validate_python(list(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        index, *rest = first["loc"]
        field = f"{name}[{index}]" + (f".{field_name(tuple(rest))}" if rest else "")
        raise InvalidArgument(field, first["msg"]) from None


def parse_rows(values: Iterable[Any], *, name: str = "jobs") -> list[Row]:
    """What :func:`parse_specs` accepts, as rows, and the same error for what it refuses
    (``jobs[i].field``, the first bad job's first error), at a fraction of its cost: a
    plain job (see the module's docstring) is checked here, any other by JobSpec."""
    items = list(values)
    checked: set[str] = set()  # texts already found storable in this batch (types, queues...)
    rows = [_plain_row(item, checked) for item in items]
    for index, row in enumerate(rows):
        if row is None:
            try:
                rows[index] = JobSpec.model_validate(items[index]).row()
            except ValidationError as exc:
                first = exc.errors()[0]
                rest = field_name(first["loc"])
                raise InvalidArgument(f"{name}[{index}]" + (f".{rest}" if rest else ""), first["msg"]) from None
    return rows  # type: ignore[return-value]


_PLAIN_FIELDS = frozenset(JobSpec.model_fields) - {"debounce", "debounce_max_wait"}  # those JobSpec checks
_SCOPES = frozenset(get_args(get_args(JobSpec.model_fields["unique_while"].annotation)[0]))
_EMPTY_PAYLOAD = "{}"


def _plain_row(values: Any, checked: set[str]) -> Row | None:
    """``values`` as a row if it is a plain job that JobSpec would take unchanged (but
    for the defaults, payload's JSON text and run_at in UTC); None to leave the
    decision to JobSpec. Never raises."""
    if type(values) is not dict or not values.keys() <= _PLAIN_FIELDS:
        return None
    get = values.get
    type_, queue = get("type"), get("queue", DEFAULT_QUEUE)
    priority, max_retries = get("priority", DEFAULT_PRIORITY), get("max_retries", DEFAULT_MAX_RETRIES)
    if not (
        _plain_text(type_, MAX_TYPE_LENGTH, checked)
        and _plain_text(queue, MAX_QUEUE_LENGTH, checked)
        and type(priority) is int and MIN_PRIORITY <= priority <= MAX_PRIORITY
        and type(max_retries) is int and 0 <= max_retries <= MAX_MAX_RETRIES
    ):
        return None
    key, scope, tags, run_at = get("idempotency_key"), get("unique_while"), get("tags"), get("run_at")
    if key is not None and not _plain_text(key, MAX_IDEMPOTENCY_KEY_LENGTH, checked):
        return None
    concurrency_key = get("concurrency_key")
    if concurrency_key is not None and not _plain_text(concurrency_key, MAX_CONCURRENCY_KEY_LENGTH, checked):
        return None
    if scope is not None and (type(scope) is not str or scope not in _SCOPES):
        return None
    if tags is not None:
        if type(tags) is not list or len(tags) > MAX_TAGS:
            return None
        if not all(_plain_text(tag, MAX_TAG_LENGTH, checked) for tag in tags) or len(set(tags)) != len(tags):
            return None
        tags = list(tags) or None  # a copy, as JobSpec's; [] is no tags
    payload = get("payload")
    try:
        if run_at is not None:
            if type(run_at) is not datetime:
                return None
            run_at = as_utc(run_at)
        if not payload:  # None or {}: the empty object
            if payload is not None and type(payload) is not dict:
                return None
            payload = JsonObject({}, _EMPTY_PAYLOAD)
        elif type(payload) is dict and all(type(k) is str for k in payload):
            payload = JsonObject(payload, storable_json(payload))
        else:
            return None
    except Exception:  # not storable, or out of range: JobSpec says why
        return None
    return (type_, queue, payload, priority, max_retries, run_at, key, tags, scope, concurrency_key)


def _plain_text(value: Any, max_length: int, checked: set[str]) -> bool:
    """``value`` is a str of 1 to ``max_length`` characters that a text column stores."""
    if type(value) is not str or not 0 < len(value) <= max_length:
        return False
    if value not in checked:
        try:
            check_text(value)
        except ValueError:
            return False
        checked.add(value)
    return True


def field_name(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field name: ``("tags", 3)`` -> ``tags[3]``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; without an offset it already means UTC.

    Converting matters: PostgreSQL refuses offsets past +-15:59, which ISO-8601 (and
    pydantic) allow. Raises ValueError when the UTC time falls outside years 1-9999.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None


def check_text(text: str) -> str:
    """Return ``text`` if PostgreSQL can store it in a text column; raise ValueError if it
    holds a NUL character or a lone surrogate."""
    if "\x00" in text:
        raise ValueError("contains a NUL character, which PostgreSQL cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains a lone surrogate, which is not valid Unicode") from None
    return text
