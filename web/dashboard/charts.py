"""Line charts drawn on the server as inline SVG (no JavaScript, nothing fetched): the
overview's throughput, depth and percentile charts over the rollup's per-minute points
(:func:`jobq.observe.rollup.series`)."""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from markupsafe import Markup, escape

WIDTH, HEIGHT = 600, 170
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 22  # room for the axis labels


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str  # "/s", "jobs", "s"
    minutes: list[datetime]
    series: dict[str, list[float | None]]  # name -> one value per minute (None: no data)


def charts_of(points: Sequence[object]) -> list[Chart]:
    """The overview's four charts from rollup points (any objects with the rollup
    :class:`~jobq.observe.rollup.Point` fields)."""
    minutes = [p.minute for p in points]  # type: ignore[attr-defined]

    def field(name: str, scale: float = 1.0) -> list[float | None]:
        values = [getattr(p, name) for p in points]
        return [None if v is None else float(v) * scale for v in values]

    return [
        Chart("Completions per second", "/s", minutes,
              {"done": field("completed", 1 / 60), "failed": field("failed", 1 / 60), "dead": field("dead", 1 / 60)}),
        Chart("Depth", "jobs", minutes, {"pending": field("pending"), "running": field("running")}),
        Chart("Run time", "s", minutes, {"p50": field("run_p50"), "p95": field("run_p95"), "p99": field("run_p99")}),
        Chart("Start latency", "s", minutes,
              {"p50": field("latency_p50"), "p95": field("latency_p95"), "p99": field("latency_p99")}),
    ]


def svg(chart: Chart) -> Markup:
    """The chart as an accessible inline ``<svg>`` (its title and latest values in its label)."""
    values = [v for vs in chart.series.values() for v in vs if v is not None]
    top = _nice(max(values)) if values else 1.0
    n = len(chart.minutes)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    latest = ", ".join(f"{name} {human(_last(vs), chart.unit)}" for name, vs in chart.series.items())
    label = f"{chart.title} ({chart.unit}) over the last {n} minutes; latest: {latest}"
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
    ]
    for frac in (0.0, 0.5, 1.0):
        gy = y(top * frac)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 4}" y="{gy + 4:.1f}" text-anchor="end">{human(top * frac, chart.unit)}</text>')
    if n:
        parts.append(f'<text class="axis" x="{LEFT}" y="{HEIGHT - 4}">{_clock(chart.minutes[0])}</text>')
        parts.append(
            f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">{_clock(chart.minutes[-1])} UTC</text>'
        )
    for index, (name, series) in enumerate(chart.series.items()):
        for run in _runs(series):
            if len(run) == 1:
                i, v = run[0]
                parts.append(f'<circle class="s{index}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="2"/>')
            else:
                coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in run)
                parts.append(f'<polyline class="line s{index}" points="{coords}"><title>{escape(name)}</title></polyline>')
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(chart: Chart) -> Markup:
    items = "".join(
        f'<li><span class="key s{i}" aria-hidden="true"></span>{escape(name)} {human(_last(vs), chart.unit)}</li>'
        for i, (name, vs) in enumerate(chart.series.items())
    )
    return Markup(f'<ul class="legend">{items}</ul>')


def _runs(series: list[float | None]) -> list[list[tuple[int, float]]]:
    """The unbroken stretches of a series (a minute without data breaks the line)."""
    runs: list[list[tuple[int, float]]] = [[]]
    for i, v in enumerate(series):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((i, v))
    return [run for run in runs if run]


def _last(series: list[float | None]) -> float | None:
    return next((v for v in reversed(series) if v is not None), None)


def _nice(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at least ``value`` (the axis' top)."""
    if value <= 0:
        return 1.0
    for k in range(-6, 16):
        for base in (1, 2, 2.5, 5):
            if base * 10.0**k >= value:
                return base * 10.0**k
    return value


def human(value: float | None, unit: str) -> str:
    """A value as people read it, with its unit and never an exponent: seconds as
    ``31 µs``, ``3.1 ms``, ``1.2 s``; ``2.5/s``; whole ``jobs``."""
    if value is None:
        return "—"
    if unit == "s":
        if value == 0:
            return "0 s"
        for scale, name in ((1e-3, "µs"), (1.0, "ms")):
            if value < scale:
                return f"{_plain(value / scale * 1000)} {name}"
        return f"{_plain(value)} s"
    if unit == "jobs":
        return f"{value:,.0f}"
    return f"{_plain(value)}{unit}"


def _plain(value: float) -> str:
    """Three significant digits at most, in plain notation: ``0.0031``, ``3.1``, ``1,234``."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def _clock(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%H:%M")
