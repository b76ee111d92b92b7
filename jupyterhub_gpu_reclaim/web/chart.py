"""The pages' charts as inline SVG drawn here (no script, no library, nothing fetched):
stacked bars per time bucket, one or more bars per bucket (`stacked_bars`), for the
what-if (idle and freed GPU-hours, live policy beside the override), the admin page's
week (GPU-hours in use, idle, freed and waited for, per day) and the usage report's days
(used, idle, idle in long stretches, no reading). Accessible: a <title> and
<desc>, a tooltip per bar; the pages show the numbers in a table as well."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

from ..report.formats import HOURS, headings, long_idle, totals_sentence
from ..service.daily_hours import DayUsage
from ..replay.whatif import WhatIf

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 40, 30, 40  # room for the last time label
FREED_COLOR, IDLE_COLOR, IN_USE_COLOR, WAITING_COLOR = "#2a9d8f", "#e9a23b", "#6c757d", "#b02a37"
IDLE_LONG_COLOR, NO_READING_COLOR = "#a0522d", "#ced4da"
FREED_ESTIMATE_COLOR = "#9fd8cf"  # freed, as estimated (paler than freed by reclaims)
LEGEND_W, LEGEND_H = 150, 16  # a legend entry's room; entries wrap to more rows
LIVE_OPACITY = "0.45"  # the what-if's live bars: paler, in the override's colors
MAX_LABELS = 12


@dataclass(frozen=True)
class Bar:
    """One bar of a bucket: its name (`arms`) and its layers' values, bottom first."""

    name: str
    values: Sequence[float]


@dataclass(frozen=True)
class Arm:
    """A kind of bar drawn in each bucket: its name, opacity and layers (name, color), bottom first."""

    name: str
    opacity: str
    layers: Sequence[tuple[str, str]]


def _nice(top: float) -> float:
    """The axis' top: 1, 2, 2.5 or 5 times a power of ten, at least `top`."""
    if top <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(top))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= top * (1 - 1e-9))


def _label(t: dt.datetime, bucket: dt.timedelta) -> str:
    return t.strftime("%m-%d") if bucket >= dt.timedelta(days=1) else t.strftime("%m-%d %H:%M")


def _span(bucket: dt.timedelta) -> str:
    hours = int(bucket.total_seconds() // 3600)
    return "day" if hours == 24 else "hour" if hours == 1 else f"{hours} hours"


def stacked_bars(css_class: str, title: str, desc: str, arms: Sequence[Arm], starts: Sequence[dt.datetime],
                 bars: Sequence[Sequence[Bar]], bucket: dt.timedelta) -> str:
    """The SVG: per bucket (starting at `starts[i]`) one bar per arm, its layers stacked
    bottom up (`bars[i][j]` for arm j). Only numbers and our own words go into it, escaped
    all the same."""
    n = max(1, len(starts))
    legend = [(color, arm.opacity, f"{name}, {arm.name}" if len(arms) > 1 else name)
              for arm in reversed(arms) for name, color in arm.layers]
    per_row = (WIDTH - LEFT) // LEGEND_W
    more = (len(legend) - 1) // per_row * LEGEND_H  # room for the legend's rows after the first
    top_y, height = TOP + more, HEIGHT + more
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top_y - BOTTOM
    top = _nice(max([sum(b.values) for group in bars for b in group] or [0]))
    group_w = plot_w / n
    bar_w = group_w * (0.76 / len(arms))

    def y(v: float) -> float:
        return top_y + plot_h - v / top * plot_h

    parts = []
    for v in (0.0, top / 2, top):  # grid and axis labels
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    every = max(1, -(-n // MAX_LABELS))
    for i, (start, group) in enumerate(zip(starts, bars, strict=True)):
        x0 = LEFT + i * group_w
        for j, (arm, b) in enumerate(zip(arms, group, strict=True)):
            x = x0 + group_w * 0.08 + j * (bar_w + group_w * 0.04)
            tip = escape(f"{arm.name}, {_label(start, bucket)}: " + ", ".join(
                f"{value:.2f} GPU-hours {name}" for (name, _), value in zip(arm.layers, b.values, strict=True)))
            rects, base = [], 0.0
            for (_, color), value in zip(arm.layers, b.values, strict=True):
                rects.append(f'<rect x="{x:.1f}" y="{y(base + value):.1f}" width="{bar_w:.1f}" '
                             f'height="{y(base) - y(base + value):.1f}" fill="{color}"/>')
                base += value
            parts.append(f'<g opacity="{arm.opacity}"><title>{tip}</title>{"".join(rects)}</g>')
        if i % every == 0:
            parts.append(f'<text x="{x0 + group_w / 2:.1f}" y="{height - BOTTOM + 14}" text-anchor="middle" '
                         f'font-size="10">{escape(_label(start, bucket))}</text>')
    for k, (color, opacity, text) in enumerate(legend):
        x, y0 = LEFT + k % per_row * LEGEND_W, 8 + k // per_row * LEGEND_H
        parts.append(f'<rect x="{x}" y="{y0}" width="12" height="12" fill="{color}" opacity="{opacity}"/>'
                     f'<text x="{x + 16}" y="{y0 + 10}" font-size="11">{escape(text)}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{height - 6}" text-anchor="end" font-size="10">'
                 f'GPU-hours per {escape(_span(bucket))}, UTC</text>')
    return (f'<svg class="{css_class}" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
            f'role="img" aria-labelledby="{css_class}-title {css_class}-desc">'
            f'<title id="{css_class}-title">{escape(title)}</title>'
            f'<desc id="{css_class}-desc">{escape(desc)}</desc>'
            f'<line x1="{LEFT}" x2="{LEFT}" y1="{top_y}" y2="{top_y + plot_h}" stroke="#888"/>'
            + "".join(parts) + "</svg>")


def whatif_chart(result: WhatIf) -> str:
    """Per bucket two bars (live policy, override), freed at the bottom, idle on top."""
    layers = (("freed", FREED_COLOR), ("idle", IDLE_COLOR))
    live, other = result.live, result.override
    desc = (f"From {result.since:%Y-%m-%d %H:%M} to {result.until:%Y-%m-%d %H:%M} UTC, per "
            f"{_span(result.bucket)}: the live policy frees {live.gpu_hours_freed:g} GPU-hours and leaves "
            f"{live.gpu_hours_idle:g} idle; the override frees {other.gpu_hours_freed:g} and leaves "
            f"{other.gpu_hours_idle:g} idle.")
    return stacked_bars(
        "whatif-chart", "Idle and freed GPU-hours, live policy and override", desc,
        [Arm("live policy", LIVE_OPACITY, layers), Arm("override", "1", layers)],
        [b.start for b in result.series],
        [[Bar("live policy", (b.live_freed, b.live_idle)), Bar("override", (b.override_freed, b.override_idle))]
         for b in result.series], result.bucket)


def usage_chart(days: Sequence[DayUsage]) -> str:
    """Per day two bars: GPU-hours held (in use, then idle) with those freed on top — what
    would have been held without reclaims —, and GPU-hours requested by waiting pods."""
    held, idle, freed, waiting = (sum(getattr(d, k) for d in days) for k in ("held", "idle", "freed", "waiting"))
    desc = (f"Over the last {len(days)} days: {held:g} GPU-hours held, {idle:g} of them idle, {freed:g} freed by "
            f"reclaims; pods waited for {waiting:g} GPU-hours.")
    return stacked_bars(
        "usage-chart", "GPU-hours per day: in use, idle, freed, waited for", desc,
        [Arm("sessions", "1", (("in use", IN_USE_COLOR), ("idle", IDLE_COLOR), ("freed", FREED_COLOR))),
         Arm("queue", "1", (("waited for", WAITING_COLOR),))],
        [d.start for d in days],
        [[Bar("sessions", (max(0.0, d.held - d.idle), d.idle, d.freed)), Bar("queue", (d.waiting,))] for d in days],
        dt.timedelta(days=1))


def report_chart(report: dict) -> str:
    """Per day two bars (as the admin page's week): the GPU-hours held — used, idle in
    shorter stretches, idle in long ones, no reading (the usage report's `by_day`, its
    words) — with those freed on top (by the service's reclaims, or as estimated on
    Prometheus's days), and the GPU-hours pods waited for."""
    names = dict(zip(HOURS, headings(report), strict=True))
    names["idle"] = f"idle < {long_idle(report)}"  # the part of idle under the long stretches
    layers = (("used", IN_USE_COLOR), ("idle", IDLE_COLOR), ("idle_long", IDLE_LONG_COLOR), ("no_reading", NO_READING_COLOR))
    days = report["by_day"]
    return stacked_bars(
        "report-chart", "GPU-hours held per day: " + ", ".join(names[k] for k, _ in layers)
        + "; freed; waited for", totals_sentence(report),
        [Arm("sessions", "1", [(names[k], color) for k, color in layers]
             + [("freed", FREED_COLOR), ("freed (estimate)", FREED_ESTIMATE_COLOR)]),
         Arm("queue", "1", (("waited for", WAITING_COLOR),))],
        [dt.datetime.fromisoformat(d["day"]) for d in days],
        [[Bar("sessions", (d["used"], max(0.0, d["idle"] - d["idle_long"]), d["idle_long"], d["no_reading"],
                           0.0 if d["freed_is_estimate"] else d["gpu_hours_freed"],
                           d["gpu_hours_freed"] if d["freed_is_estimate"] else 0.0)),
          Bar("queue", (d["gpu_hours_waited"],))] for d in days], dt.timedelta(days=1))
