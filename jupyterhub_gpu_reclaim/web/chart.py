"""The what-if's chart: idle and freed GPU-hours per time bucket, live policy beside the
override, as inline SVG drawn here (no script, no library, nothing fetched). Accessible: a
<title> and <desc> with the totals, a tooltip per bar; the page shows the numbers in a
table as well."""

from __future__ import annotations

import datetime as dt
import math
from html import escape

from ..whatif import WhatIf

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 40, 30, 40  # room for the last time label
FREED, IDLE = "#2a9d8f", "#e9a23b"  # the same colors for both policies; the live bars paler
LIVE_OPACITY = "0.45"
MAX_LABELS = 12


def _nice(top: float) -> float:
    """The axis' top: 1, 2, 2.5 or 5 times a power of ten, at least `top`."""
    if top <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(top))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= top * (1 - 1e-9))


def _label(t: dt.datetime, bucket: dt.timedelta) -> str:
    return t.strftime("%m-%d") if bucket >= dt.timedelta(days=1) else t.strftime("%m-%d %H:%M")


def whatif_chart(result: WhatIf) -> str:
    """The SVG: per bucket two stacked bars (live, override), freed at the bottom, idle on
    top. Only numbers and our own words go into it, escaped all the same."""
    series = result.series
    n = max(1, len(series))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = _nice(max([max(b.live_idle + b.live_freed, b.override_idle + b.override_freed) for b in series] or [0]))
    group = plot_w / n
    bar = group * 0.38

    def y(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    parts = []
    for v in (0.0, top / 2, top):  # grid and axis labels
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    every = max(1, -(-n // MAX_LABELS))
    for i, b in enumerate(series):
        x0 = LEFT + i * group
        for j, (name, idle, freed, opacity) in enumerate((
                ("live policy", b.live_idle, b.live_freed, LIVE_OPACITY),
                ("override", b.override_idle, b.override_freed, "1"))):
            x = x0 + group * 0.08 + j * (bar + group * 0.04)
            tip = escape(f"{name}, {_label(b.start, result.bucket)}: {idle:.2f} GPU-hours idle, "
                         f"{freed:.2f} freed")
            y_freed, y_idle = y(freed), y(freed + idle)
            parts.append(f'<g opacity="{opacity}"><title>{tip}</title>'
                         f'<rect x="{x:.1f}" y="{y_freed:.1f}" width="{bar:.1f}" height="{y(0) - y_freed:.1f}" fill="{FREED}"/>'
                         f'<rect x="{x:.1f}" y="{y_idle:.1f}" width="{bar:.1f}" height="{y_freed - y_idle:.1f}" fill="{IDLE}"/></g>')
        if i % every == 0:
            parts.append(f'<text x="{x0 + group / 2:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" '
                         f'font-size="10">{escape(_label(b.start, result.bucket))}</text>')
    legend = [(FREED, "1", "freed, override"), (IDLE, "1", "idle, override"),
              (FREED, LIVE_OPACITY, "freed, live"), (IDLE, LIVE_OPACITY, "idle, live")]
    for k, (color, opacity, text) in enumerate(legend):
        x = LEFT + k * 150
        parts.append(f'<rect x="{x}" y="8" width="12" height="12" fill="{color}" opacity="{opacity}"/>'
                     f'<text x="{x + 16}" y="18" font-size="11">{escape(text)}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end" font-size="10">'
                 f'GPU-hours per {escape(_span(result.bucket))}, UTC</text>')
    live, other = result.live, result.override
    desc = (f"From {result.since:%Y-%m-%d %H:%M} to {result.until:%Y-%m-%d %H:%M} UTC, per "
            f"{_span(result.bucket)}: the live policy frees {live.gpu_hours_freed:g} GPU-hours and leaves "
            f"{live.gpu_hours_idle:g} idle; the override frees {other.gpu_hours_freed:g} and leaves "
            f"{other.gpu_hours_idle:g} idle.")
    return (f'<svg class="whatif-chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img" aria-labelledby="whatif-chart-title whatif-chart-desc">'
            f'<title id="whatif-chart-title">Idle and freed GPU-hours, live policy and override</title>'
            f'<desc id="whatif-chart-desc">{escape(desc)}</desc>'
            f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#888"/>'
            + "".join(parts) + "</svg>")


def _span(bucket: dt.timedelta) -> str:
    hours = int(bucket.total_seconds() // 3600)
    return "day" if hours == 24 else "hour" if hours == 1 else f"{hours} hours"
