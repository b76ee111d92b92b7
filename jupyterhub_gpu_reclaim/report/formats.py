"""The report as people read it (text), as tools read it (JSON: run.build_report's dict) and as
spreadsheets read it (CSV: one row per UTC day, user and profile)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from ..durations import format_hours
from ..oneline import one_line

HOURS = ("held", "used", "idle", "idle_long", "no_reading")
HOURS_COLUMNS = tuple(f"gpu_hours_{k}" for k in HOURS)  # the CSV's
HEADINGS = {"held": "held", "used": "used", "idle": "idle", "idle_long": "idle ≥ {long}", "no_reading": "no reading"}


def counted(n: int, noun: str) -> str:
    """"1 pod", "2 pods"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def as_json(report: dict) -> str:
    return json.dumps(report, indent=1) + "\n"


def csv_cell(value: Any) -> str:
    """A cell for a spreadsheet: text that would start a formula (=, +, -, @, a tab or CR)
    is written after a quote, as OWASP's CSV-injection advice says (user, group and server
    names are the users' own); None is empty."""
    text = "" if value is None else str(value)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def as_csv(report: dict, extra: Sequence[str] = ()) -> str:
    """One row per day, user and profile (and the `extra` fields of each row after them)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["day", "user", "groups", "profile", *HOURS_COLUMNS, *extra])
    for row in report["rows"]:
        writer.writerow([row["day"], csv_cell(row["user"]), csv_cell(";".join(row["groups"])), csv_cell(row["profile"]),
                         *(row[k] for k in HOURS), *(csv_cell(row[k]) for k in extra)])
    return out.getvalue()


def long_idle(report: dict) -> str:
    """The long-idle span as the report writes it ("2 h")."""
    return f"{report['long_idle_h']:g} h"


def headings(report: dict) -> list[str]:
    """The headings of the hours' columns, in HOURS' order."""
    return [HEADINGS[k].format(long=long_idle(report)) for k in HOURS]


def totals_sentence(report: dict) -> str:
    """The report's totals in one sentence, and what counts as used."""
    t = report["totals"]
    used = f" ({100 * t['used'] / t['held']:.0f}% of held)" if t["held"] else ""
    return (f"GPU time held {format_hours(t['held'])}: used {format_hours(t['used'])}{used}, "
            f"idle {format_hours(t['idle'])} (in stretches of {long_idle(report)} or more: "
            f"{format_hours(t['idle_long'])}), no reading {format_hours(t['no_reading'])}. "
            f"Used: at least {report['idle_threshold_percent']:g}% in a step.")


def _table(title: str, key: str, rows: list[dict], report: dict, extra: str | None = None) -> list[str]:
    if not rows:
        return []
    heads = [title] + headings(report) + ([extra] if extra else [])
    body = [[one_line(r[key])] + [f"{r[k]:.2f}" for k in HOURS] + ([one_line(", ".join(r[extra]))] if extra else [])
            for r in rows]
    widths = [max(len(line[i]) for line in [heads, *body]) for i in range(len(heads))]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in (0, len(heads) - 1) and (i == 0 or extra) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return ["", fmt(heads), *map(fmt, body)]


def queue_sentence(q: dict) -> str:
    """The GPU queue's summary (run.history_queue) in one sentence, its starts apart."""
    s = q["starting"]
    return (f"GPU queue: {counted(q['waits'], 'wait')} of {counted(q['pods'], 'pod')} for a GPU (unschedulable), "
            f"{q['hours_waited']:.2f} h in all ({q['gpu_hours_waited']:.2f} GPU-hours asked for), "
            f"median {q['median_wait_h']:.2f} h, longest {q['longest_wait_h']:.2f} h; "
            f"{counted(s['waits'], 'start')} of {counted(s['pods'], 'pod')} once scheduled (image pull, container "
            f"start), {s['hours_waited']:.2f} h in all, longest {s['longest_wait_h']:.2f} h.")


def estimate_sentence(e: dict) -> str:
    """The policy estimate (run.history_estimate) in one sentence, labelled an estimate."""
    return (f"Estimate: {e['policy']} would have freed about {e['gpu_hours_freed']:.2f} GPU-hours "
            f"({counted(e['reclaims'], 'reclaim')}); {counted(e['would_have_interrupted'], 'reclaim')} would "
            f"have interrupted someone who used the GPU again (not counted); "
            f"{e['gpu_hours_idle_at_end_not_counted']:.2f} GPU-hours still idle at the end are not counted; "
            f"{counted(e['pods_on_time_sliced_gpus_left_out'], 'pod')} on time-sliced GPUs left out.")


def as_text(report: dict) -> str:
    w, q, e = report["window"], report["queue"], report["policy_estimate"]
    lines = [
        f"GPU usage from {report['source']['prometheus']}, {w['since']} to {w['until']}, "
        f"a step of {w['step_s']} s (days in UTC)",
        totals_sentence(report),
    ]
    lines += _table("user", "user", report["by_user"], report, "groups" if report["source"]["groups"] else None)
    lines += _table("group", "group", report["by_group"], report)
    lines += _table("profile", "profile", report["by_profile"], report)
    lines += _table("day", "day", report["by_day"], report)
    lines += ["", queue_sentence(q), "", estimate_sentence(e), "Assumed:"]
    lines += [f"- {a}" for a in e["assumed"]]
    if report["notes"]:
        lines += ["", "Notes:"] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
