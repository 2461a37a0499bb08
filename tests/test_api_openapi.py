"""The OpenAPI document: valid, generated from the request models, and true to the app
(schemathesis sends requests generated from it and finds no 5xx)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobq.settings import Settings
from jobq.spec import JobSpec
from web.app import create_app

pytestmark = [
    pytest.mark.api,
    pytest.mark.db,
    # schemathesis draws from `random` inside its strategies; not ours to fix.
    pytest.mark.filterwarnings("ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"),
]

EXAMPLES_PER_OPERATION = 50


def test_the_document_is_valid_openapi(client):
    document = client.get("/openapi.json").get_json()
    validate(document)
    assert document["openapi"].startswith("3.1")


def test_every_summary_is_a_whole_sentence(client):
    """flask-openapi3 takes a docstring's first line, wherever it was wrapped: /docs
    showed "...paginated: by offset, or by"."""
    paths = client.get("/openapi.json").get_json()["paths"]
    summaries = {f"{method.upper()} {path}": op["summary"] for path, ops in paths.items() for method, op in ops.items()}
    cut = {name: summary for name, summary in summaries.items() if not summary.rstrip().endswith((".", "?", "!"))}
    assert not cut
    assert summaries["GET /jobs"].endswith("by offset, or by cursor (each page's next_cursor; before= starts after a given job).")


def test_the_job_body_is_documented_from_the_model_that_validates_it(client):
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    body = schemas["JobBody"]
    assert set(body["properties"]) == set(JobSpec.model_fields)
    assert body["required"] == ["type"]
    priority = body["properties"]["priority"]
    assert (priority["type"], priority["minimum"], priority["maximum"]) == ("integer", 1, 10)
    assert schemas["JobBatch"]["properties"]["jobs"]["maxItems"] == 1000


def test_every_route_is_documented_with_its_errors(client):
    paths = client.get("/openapi.json").get_json()["paths"]
    assert set(paths) == {
        "/jobs", "/jobs/batch", "/jobs/{job_id}", "/jobs/{job_id}/cancel", "/dead-letter", "/dead-letter/{dead_letter_id}",
        "/dead-letter/{dead_letter_id}/replay", "/dead-letter/groups", "/queues", "/queues/{name}", "/queues/{name}/pause", "/limits", "/limits/{pattern}",
        "/queues/{name}/resume", "/metrics", "/metrics/prometheus", "/health", "/ready",
        "/schedules", "/schedules/{name}", "/schedules/{name}/pause", "/schedules/{name}/resume", "/schedules/{name}/run",
        "/jobs/{job_id}/retry", "/jobs/{job_id}/run-now", "/jobs/bulk", "/operations/{operation_id}",
        "/dead-letter/groups/{group_id}/replay", "/dead-letter/groups/{group_id}/discard", "/audit", "/stats",
        "/workflows", "/workflows/{workflow_id}", "/workflows/{workflow_id}/cancel", "/workflows/{workflow_id}/retry",
    }
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert "500" in operation["responses"], (method, path)
            if path != "/health":
                assert {"401", "503"} <= set(operation["responses"]), (method, path)
                assert operation["security"] == [{"bearer": []}]


# The document as schemathesis reads it when the module is collected: from an app that
# is never called (building one opens no connection).
DOCUMENT = create_app(Settings.from_env({}, database_url="postgresql://nobody@/unused")).api_doc
schema = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture
def app(make_app):
    """One app (one pool) for all the examples of an operation."""
    return make_app()


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# Derandomized, so that CI sees the same cases every run (explore with random seeds by
# removing derandomize, or with more examples, when the API changes).
@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
def test_generated_requests_never_get_a_server_error_and_answer_as_documented(case, app):
    case.call_and_validate(app=app, checks=CHECKS)
