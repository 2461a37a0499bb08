"""JSON in and out of the API: a strict parser and a fast encoder, as Flask's JSON provider.

Request bodies are parsed by pydantic-core's parser (the one the models use): invalid
UTF-8, lone surrogates, ``NaN``/``Infinity`` and nesting past its recursion limit are
"not JSON" (400); integers of any size keep their exact value. Responses are encoded by
pydantic-core as compact UTF-8, keys in the order given.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import TypeAdapter
from flask import Flask, Request, Response, request
from flask.json.provider import JSONProvider
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

from jobq.jobs.ledger import Page


class JsonProvider(JSONProvider):
    """Flask's ``app.json``: used by ``request.get_json()``, ``jsonify`` and dict returns."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Parse JSON text; raise ValueError saying where it is not JSON."""
        return pydantic_core.from_json(s, allow_inf_nan=False)

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return encode(obj).decode()

    def response(self, *args: Any, **kwargs: Any) -> Response:
        """A JSON response of one value (or of the keyword arguments, as ``jsonify``)."""
        return self._app.response_class(encode(self._prepare_response_obj(args, kwargs)), mimetype="application/json")


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON; a non-finite float (none should reach here) becomes null."""
    return pydantic_core.to_json(value, inf_nan_mode="null")


class JsonRequest(Request):
    """Flask's request, saying why a body is refused (Flask hides it outside debug mode)."""

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        if e is None:
            raise UnsupportedMediaType("Content-Type must be application/json")
        raise BadRequest(f"body is not valid JSON: {e}")


def require_json_body() -> None:
    """Parse the body of a POST as JSON before its route reads it (a ``before_request``
    hook of the routes that take a body: authentication has run).

    Raises werkzeug's 415 when the content type is not JSON, 400 when the body is
    not JSON, 413 when it is longer than the app's ``MAX_CONTENT_LENGTH``. The
    parsed value is cached on the request for the route's validation.
    """
    if request.method != "POST":
        return
    limit = request.max_content_length
    if request.content_length is None and limit is not None:
        # A body without a Content-Length (chunked) is cut at the limit by werkzeug
        # without a word: if the client had more to send, it was too large.
        if len(request.get_data()) >= limit and request.environ["wsgi.input"].read(1):
            raise RequestEntityTooLarge()
    if isinstance(request.get_json(), str):
        # flask-openapi3 would read a JSON string as JSON text once more: refuse it
        # for what it is (a 422, through errors.validation_response).
        _OBJECT.validate_python(request.get_json())


_OBJECT = TypeAdapter(dict[str, Any])


def page_dict(page: Page[Any], *, cursors: bool = False) -> dict[str, Any]:
    """A page of rows as the API shows it: ``{items, total, limit, offset}``, with
    ``next_cursor`` (null on the last page) for a listing that pages by cursor too
    (``cursors``), and ``"total_exact": false`` when the total is only a lower bound."""
    items = [row.to_dict() for row in page.items]
    shown = {"items": items, "total": page.total, "limit": page.limit, "offset": page.offset}
    if cursors:
        shown["next_cursor"] = page.next_cursor
    if not page.total_exact:
        shown["total_exact"] = False
    return shown


def install(app: Flask) -> None:
    """Make :class:`JsonProvider` the app's JSON provider, :class:`JsonRequest` its requests'."""
    app.json = JsonProvider(app)
    app.request_class = JsonRequest
