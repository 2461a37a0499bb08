"""How routes are declared, apart from the models they validate (web/schemas.py): the
bearer security scheme of the OpenAPI document, the blueprint of a resource guarded by
the token, and the OpenAPI parameters documented from a model of headers.

The token itself is checked by :mod:`web.auth`; this module only declares it.
"""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag

from web.schemas import Error, Parameters

# The OpenAPI security requirement of every route but /health (JOBQ_API_TOKEN).
BEARER_SCHEME = {"bearer": {"type": "http", "scheme": "bearer"}}
BEARER = [{"bearer": []}]

# What any route that needs the token and the database may answer.
GUARDED = {401: Error, 503: Error}


def resource(name: str, import_name: str, description: str) -> APIBlueprint:
    """The blueprint of one resource: its routes need the token and the database."""
    tags = [Tag(name=name, description=description)]
    return APIBlueprint(name, import_name, abp_tags=tags, abp_security=BEARER, abp_responses=GUARDED)


def header_parameters(model: type[Parameters]) -> list[dict[str, Any]]:
    """The OpenAPI parameters (``in: header``) of a model of headers, one per field."""
    schema = model.model_json_schema()
    return [
        {"name": name, "in": "header", "required": name in schema.get("required", ()),
         "description": field.get("description"), "schema": field}
        for name, field in schema["properties"].items()
    ]
