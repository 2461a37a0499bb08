"""A handler module that sets up Sentry as an application would, in the supervisor
before the fork, with sentry-sdk's transport replaced by one that appends each event of
an envelope as one JSON line to the file JOBQ_TEST_ENVELOPES names; JOBQ_TEST_DEAD_ONLY=1
installs jobq.contrib.sentry with dead_letters_only."""

from __future__ import annotations

import json
import os

import sentry_sdk
from sentry_sdk.transport import Transport

import jobq
import jobq.contrib.sentry


class Recorded(Transport):
    """Keeps the envelopes instead of sending them."""

    def capture_envelope(self, envelope) -> None:  # type: ignore[no-untyped-def]
        with open(os.environ["JOBQ_TEST_ENVELOPES"], "a", encoding="utf-8") as out:
            for item in envelope.items:
                if item.type == "event":
                    event = item.payload.json
                    out.write(json.dumps({
                        "fingerprint": event.get("fingerprint"),
                        "jobq": event["contexts"]["jobq"],
                        "tags": event.get("tags", {}),
                        "exception": event["exception"]["values"][-1]["type"],
                        "value": event["exception"]["values"][-1]["value"],
                        "pid": os.getpid(),
                    }) + "\n")


sentry_sdk.init(dsn="https://public@sentry.example.invalid/1", transport=Recorded, default_integrations=False)
jobq.contrib.sentry.install(dead_letters_only=os.environ.get("JOBQ_TEST_DEAD_ONLY") == "1")


@jobq.register("order_missing")
def order_missing(job: jobq.Job) -> None:
    raise LookupError(f"order {job.payload['order']} not found")
