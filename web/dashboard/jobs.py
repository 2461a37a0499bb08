"""``/dashboard/jobs``: status tabs with their counts, the filter, a page of jobs, and
acting on the selected jobs or on all that match: a confirmation page with the exact
count (the action's dry run), then one bulk operation (:mod:`jobq.jobs.operations`)."""

from __future__ import annotations

import re
from typing import Any

from flask import Response, redirect, request, url_for
from werkzeug.datastructures import MultiDict

import jobq
from jobq.handlers import known as handlers_known
from jobq.jobs import operations
from jobq.observe import tallies
from jobq.errors import InvalidArgument
from jobq.jobs.filters import parse_filter
from jobq.job import STATUSES
from web.dashboard import common, security
from web.dashboard.blueprints import actions, pages

FILTER_FIELDS = ("status", "queue", "type", "tag", "ids", "created_after", "created_before", "error", "schedule")
ACTIONS = {"cancel": "Cancel", "retry": "Retry", "delete": "Delete", "run_now": "Run now"}
TABS = ("pending", "claimed", "running", "done", "dead", "cancelled")  # "failed": only when some exist


def read_filter(args: MultiDict[str, str]) -> dict[str, Any]:
    """The filter of a request's fields (empty ones left out); ``ids`` may be written
    ``3, 7 12``. Raises InvalidArgument naming a bad field."""
    values: dict[str, Any] = {}
    for name in FILTER_FIELDS:
        raw = (args.get(name) or "").strip()
        if not raw:
            continue
        if name == "ids":
            parts = [p for p in re.split(r"[,\s]+", raw) if p]
            if not all(p.isdigit() for p in parts):
                raise InvalidArgument("ids", "must be job ids separated by commas or spaces")
            values["ids"] = [int(p) for p in parts]
        else:
            values[name] = raw
    parse_filter(values)
    return values


@pages.get("/jobs")
def jobs() -> str:
    """One page of jobs, newest first; the next by keyset (``cursor``: the page's
    ``next_cursor``), as cheap a million rows deep as on top."""
    cursor = request.args.get("cursor") or None
    problem = None
    try:
        job_filter = read_filter(request.args)
    except InvalidArgument as exc:
        job_filter, problem = {}, str(exc)
    with common.database() as conn:
        tally = tallies.by_status(job_filter, conn=conn)
        try:
            listing = jobq.list_jobs(**job_filter, limit=common.PAGE_SIZE, cursor=cursor, capped=True, conn=conn)
        except InvalidArgument as exc:  # a cursor that is not one: the first page
            problem, cursor = str(exc), None
            listing = jobq.list_jobs(**job_filter, limit=common.PAGE_SIZE, capped=True, conn=conn)
        known = jobq.counts(conn=conn)
        declared = handlers_known.declared(stale_seconds=common.stale_seconds(), conn=conn)
    tabs = [s for s in STATUSES if s in TABS or tally.by_status.get(s)]
    # How many match: exact from the tally when it is (the counters, or a small count),
    # else the listing's count, capped.
    if tally.exact:
        status = job_filter.get("status")
        matching, matching_exact = (tally.by_status.get(status, 0) if status else tally.total), True
    else:
        matching, matching_exact = listing.total, listing.total_exact
    return common.page(
        "jobs.html", "Jobs", listing=listing, tally=tally, tabs=tabs, job_filter=job_filter, problem=problem,
        count_note=_count_note(job_filter, tally), matching=matching, matching_exact=matching_exact,
        queues=sorted(known.queues), types=sorted(known.types), actions=ACTIONS, cursor=cursor,
        unhandled=set(declared.without_handler(job.type for job in listing.items)),
    )


def _count_note(job_filter: dict[str, Any], tally: tallies.Tally) -> str:
    if not tally.exact:
        return (f"More than {tally.cap:,} jobs match: counts per status are not shown; "
                "an action's exact count comes from its dry run.")
    if set(job_filter) <= tallies.COUNTER_CRITERIA:
        return "Counts exact, from the counters."
    return f"Counts exact (counted: fewer than {tally.cap:,} jobs match)."


@pages.get("/jobs/confirm")
def confirm() -> str | tuple[str, int]:
    """What an action would do: the jobs it names (selected ones, or all matching the
    filter) counted now by its dry run, and the button that does it."""
    action = request.args.get("action", "")
    try:
        if action not in ACTIONS:
            raise InvalidArgument("action", f"must be one of {', '.join(ACTIONS)}")
        target = _target(request.args)
        operations.check_job_action(action, target, None)
        with common.database() as conn:
            matched = operations.count(target, conn=conn)
    except InvalidArgument as exc:
        return common.page("message.html", "Nothing to do", message=str(exc), back=_back()), 400
    return common.page(
        "confirm.html", "Confirm", action=action, label=ACTIONS[action], target=target, matched=matched,
        fields=_hidden_fields(request.args), back=_back(),
    )


@actions.post("/jobs/bulk")
def bulk() -> Response | tuple[str, int]:
    """Start the confirmed action as a bulk operation; its page follows it."""
    action = request.form.get("action", "")
    try:
        if action not in ACTIONS:
            raise InvalidArgument("action", f"must be one of {', '.join(ACTIONS)}")
        target = _target(request.form)
        operation = operations.start_in_background(
            common.database_url(), action, actor=security.actor(), job_filter=target
        )
    except InvalidArgument as exc:
        return common.page("message.html", "Nothing done", message=str(exc), back=url_for("dashboard.jobs")), 400
    return redirect(url_for("dashboard.operation", operation_id=operation.id))


def _target(args: MultiDict[str, str]) -> dict[str, Any]:
    """All jobs matching the filter (``all=1``), or the selected ids (``selected``)."""
    if args.get("all") == "1":
        return read_filter(args)
    selected = [value for value in args.getlist("selected") if value.isdigit()]
    if not selected:
        raise InvalidArgument("selected", "select some jobs, or all that match the filter")
    return {"ids": sorted({int(value) for value in selected})}


def _hidden_fields(args: MultiDict[str, str]) -> list[tuple[str, str]]:
    names = (*FILTER_FIELDS, "all", "action", "selected")
    return [(name, value) for name in names for value in args.getlist(name) if value]


def _back() -> str:
    kept = {name: request.args.get(name) for name in FILTER_FIELDS if request.args.get(name)}
    return url_for("dashboard.jobs", **kept)
