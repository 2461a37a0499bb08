"""``/dashboard/dead-letter``: the letters waiting, grouped by cause (type and error
signature) with counts and first/last seen; a group's letters; replay or discard a
whole group (one bulk operation, after a confirmation with its count) or the letters
selected (:mod:`jobq.jobs.dead_letters`)."""

from __future__ import annotations

import re

from flask import Response, redirect, request, url_for

from jobq.jobs import dead_letters
from jobq.jobs import operations
from jobq.errors import DeadLetterGroupNotFound, InvalidArgument
from web.dashboard import common, security
from web.dashboard.blueprints import actions, pages

GROUP_ACTIONS = {"replay": "Replay", "discard": "Discard"}
LETTERS_SHOWN = 200


@pages.get("/dead-letter")
def groups() -> str:
    with common.database() as conn:
        listed = dead_letters.groups(limit=dead_letters.MAX_GROUPS, conn=conn)
    return common.page("dead_letter.html", "Dead letters", groups=listed)


@pages.get("/dead-letter/groups/<group_id>")
def group(group_id: str) -> str:
    _check(group_id)
    with common.database() as conn:
        found = dead_letters.group(group_id, conn=conn)
        letters = dead_letters.letters_of_group(group_id, limit=LETTERS_SHOWN, conn=conn)
    return common.page(
        "dead_letter_group.html", "Dead-letter group", group=found, letters=letters, shown=LETTERS_SHOWN,
        actions=GROUP_ACTIONS,
    )


@pages.get("/dead-letter/groups/<group_id>/confirm")
def confirm_group(group_id: str) -> str:
    action = request.args.get("action", "")
    if action not in GROUP_ACTIONS:
        raise InvalidArgument("action", f"must be one of {', '.join(GROUP_ACTIONS)}")
    _check(group_id)
    with common.database() as conn:
        found = dead_letters.group(group_id, conn=conn)
    return common.page(
        "confirm_group.html", "Confirm", group=found, action=action, label=GROUP_ACTIONS[action],
    )


@actions.post("/dead-letter/groups/<group_id>/<any(replay, discard):action>")
def act_on_group(group_id: str, action: str) -> Response:
    _check(group_id)
    operation = operations.start_in_background(
        common.database_url(), action, actor=security.actor(), dead_letter_group=group_id
    )
    return redirect(url_for("dashboard.operation", operation_id=operation.id))


@actions.post("/dead-letter/letters/<any(replay, discard):action>")
def act_on_letters(action: str) -> Response:
    """The letters selected on a group's page (at most a page of them)."""
    ids = sorted({int(v) for v in request.form.getlist("selected") if v.isdigit()})
    if not ids:
        raise InvalidArgument("selected", "select some dead letters first")
    actor = security.actor()
    with common.database() as conn:
        if action == "replay":
            dead_letters.replay_many(ids, actor=actor, conn=conn)
        else:
            dead_letters.discard_many(ids, actor=actor, conn=conn)
    back = request.form.get("back", "")
    return redirect(back if back.startswith("/dashboard/") else url_for("dashboard.groups"))


def _check(group_id: str) -> None:
    """An id no group can have (16 hex digits) is not found, not sent."""
    if not re.fullmatch(operations.GROUP_ID_PATTERN, group_id):
        raise DeadLetterGroupNotFound(group_id)
