"""A workflow's graph as inline SVG, drawn on the server (no script, no CDN): steps in
columns by depth (the longest path from a root), each a box coloured by its job's
status and linking to the job's page, edges as lines from parent to child. Past
:data:`MAX_DRAWN` steps the page shows the table alone."""

from __future__ import annotations

from collections.abc import Callable

from markupsafe import Markup, escape

from jobq.workflows.runs import WorkflowRun

MAX_DRAWN = 300
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 34, 60, 14, 10


def depths(names: list[str], edges: list[tuple[str, str, str | None]]) -> dict[str, int]:
    """Each step's column: 0 for a step without parents, else one more than its deepest parent."""
    parents: dict[str, list[str]] = {name: [] for name in names}
    for parent, child, _ in edges:
        parents.setdefault(child, []).append(parent)
    found: dict[str, int] = {}
    for start in names:
        stack = [start]
        while stack:
            name = stack[-1]
            todo = [p for p in parents.get(name, []) if p not in found]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            found[name] = 1 + max((found[p] for p in parents.get(name, [])), default=-1)
    return found


def svg(run: WorkflowRun, job_url: Callable[[int], str]) -> Markup | None:
    """The graph of ``run`` (None past MAX_DRAWN steps); ``job_url`` gives a job's page."""
    steps = run.steps
    if not steps or len(steps) > MAX_DRAWN:
        return None
    column = depths([s.name for s in steps], run.edges)
    rows: dict[int, int] = {}
    place: dict[str, tuple[float, float]] = {}
    for step in steps:
        col = column[step.name]
        row = rows.get(col, 0)
        rows[col] = row + 1
        place[step.name] = (PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(column.values()) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values()) * (BOX_H + GAP_Y) - GAP_Y
    label = f"Graph of workflow {run.id}: {len(steps)} steps, {len(run.edges)} edges"
    parts = [f'<svg class="workflow-graph" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>']
    for parent, child, _ in run.edges:
        (x1, y1), (x2, y2) = place[parent], place[child]
        parts.append(f'<line class="edge" x1="{x1 + BOX_W:.0f}" y1="{y1 + BOX_H / 2:.0f}" '
                     f'x2="{x2:.0f}" y2="{y2 + BOX_H / 2:.0f}"/>')
    for step in steps:
        x, y = place[step.name]
        status = step.job.status if step.job else "gone"
        box = (f'<rect class="step step-{escape(status)}" x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
               f'<text x="{x + 6:.0f}" y="{y + 14:.0f}">{escape(step.name[:22])}</text>'
               f'<text class="step-status" x="{x + 6:.0f}" y="{y + 28:.0f}">{escape(status)}</text>'
               f"<title>{escape(step.name)}: {escape(status)}</title>")
        if step.job is not None:
            box = f'<a href="{escape(job_url(step.job.id))}" class="step-link">{box}</a>'
        parts.append(box)
    parts.append("</svg>")
    return Markup("".join(parts))
