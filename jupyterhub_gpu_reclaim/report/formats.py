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
from ..wording import count

HOURS = ("held", "used", "idle", "idle_long", "no_reading")
HOURS_COLUMNS = tuple(f"gpu_hours_{k}" for k in HOURS)  # the CSV's
HEADINGS = {"held": "held", "used": "used", "idle": "idle", "idle_long": "idle ≥ {long}", "no_reading": "no reading"}


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
    """The GPU queue's summary (run.history_queue) in one sentence, its starts apart; its
    durations in words (`format_hours`), as the report's other sentences and tables."""
    s = q["starting"]
    return (f"GPU queue: {count(q['waits'], 'wait')} of {count(q['pods'], 'pod')} for a GPU (unschedulable), "
            f"{format_hours(q['hours_waited'])} in all ({format_hours(q['gpu_hours_waited'])} of GPU time asked for), "
            f"median {format_hours(q['median_wait_h'])}, longest {format_hours(q['longest_wait_h'])}; "
            f"{count(s['waits'], 'start')} of {count(s['pods'], 'pod')} once scheduled (image pull, container "
            f"start), {format_hours(s['hours_waited'])} in all, longest {format_hours(s['longest_wait_h'])}.")


def estimate_sentence(e: dict) -> str:
    """The policy estimate (run.history_estimate) in one sentence, labelled an estimate."""
    return (f"Estimate: {e['policy']} would have freed about {format_hours(e['gpu_hours_freed'])} of GPU time "
            f"({count(e['reclaims'], 'reclaim')}); {count(e['would_have_interrupted'], 'reclaim')} would "
            f"have interrupted someone who used the GPU again (not counted); GPU time still idle at the end "
            f"({format_hours(e['gpu_hours_idle_at_end_not_counted'])}) is not counted; "
            f"{count(e['pods_on_time_sliced_gpus_left_out'], 'pod')} on time-sliced GPUs left out.")


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
