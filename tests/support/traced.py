"""An OpenTelemetry SDK tracer provider that writes each span as one JSON line to the
file named by JOBQ_TEST_SPANS: configured at a `jobq worker`'s start, before its forks,
by support/otel_boot/sitecustomize.py; run as a script it is the process that enqueues
(``python -m support.traced <type> <count>``, or ``http <type>``: through the API's
routes), under a span of its own."""

from __future__ import annotations

import json
import os
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import jobq
import support.handlers  # noqa: F401  (the test handlers, registered beside this provider)


class JsonLines(SpanExporter):
    """Appends one line per span: what the tests compare (ids in hex, as traceparent has them)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans) -> SpanExportResult:  # type: ignore[no-untyped-def]
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                context = span.get_span_context()
                out.write(json.dumps({
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                    "links": [f"{link.context.span_id:016x}" for link in span.links],
                    "status": span.status.status_code.name,
                    "events": [event.name for event in span.events],
                    "pid": os.getpid(),
                }) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(JsonLines(os.environ["JOBQ_TEST_SPANS"]), schedule_delay_millis=100))
trace.set_tracer_provider(provider)


def main(job_type: str, count: int) -> None:
    with trace.get_tracer("test").start_as_current_span("request"):
        if count == 1:
            jobq.enqueue(job_type)
        else:
            jobq.enqueue_many([{"type": job_type}] * count)
    provider.force_flush()


def over_http(job_type: str) -> None:
    """The API's routes in this process (a client of the app): POST /jobs and POST
    /jobs/batch, each with the traceparent header of a client span ended before the
    request (only the header crosses, as from another process)."""
    from opentelemetry.propagate import inject

    from jobq.settings import Settings
    from web.app import create_app

    client = create_app(Settings.from_env()).test_client()
    for path, body in (("/jobs", {"type": job_type}), ("/jobs/batch", {"jobs": [{"type": job_type}] * 2})):
        carrier: dict[str, str] = {}
        with trace.get_tracer("test").start_as_current_span(f"client {path}"):
            inject(carrier)
        answer = client.post(path, json=body, headers={"traceparent": carrier["traceparent"]})
        assert answer.status_code == 201, answer.get_json()
    provider.force_flush()


if __name__ == "__main__":
    if sys.argv[1] == "http":
        over_http(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]))
