"""Put first on a process's PYTHONPATH (with tests/ after it), this configures the tests'
tracer provider (support.traced) when the interpreter starts, before `jobq worker`
forks anything: the way ``opentelemetry-instrument`` configures the SDK, through a
sitecustomize of its own. The worker and maintenance processes inherit the provider."""

import support.traced  # noqa: F401
