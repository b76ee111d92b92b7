"""How things look: times, durations, state texts, sessions and reclaim records as JSON, the
utilization sparkline, and the Jinja environment of the page templates."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, Mapping

import jinja2
from markupsafe import Markup, escape

from ..durations import format_exact, format_hours
from ..policy.config import PolicyConfig
from ..policy.decider import IDLE_RULES
from ..service.status import SPARK_WINDOW, SessionStatus
from ..signals.node_gpus import in_words, kind_name
from ..timestamps import format_time, parse_time_lenient, utcnow
from ..service.daily_hours import freed_gpu_hours
from ..store.audit import AuditRecord
from ..store.reclaims import ReclaimRecord
from ..service.reasons import SAID, Sentence, sentence, why
from ..wording import (KEEPS, LOSES, SAVE_OUTCOME_WORDS, clock, count, exact_utc, expected_free, format_util, plural,
                       relative, server_name, spark_label)
from .paths import TEMPLATES

#: what the pages say after an action (the forms' notices, the admin API's messages)
NOTICES = {
    "kept": "kept alive until {until}",
    "stopping": "stopping {session}: the GPU is freed in a moment",
    "reclaiming": "reclaiming {session}",
    "exempt": "{session} exempt until {until}",
    "intent-cleared": "intent of {session} cleared",
    "no-intent": "{session} had no intent",
    "retrying": "retrying the stop of {session}",
}


def notice(code: str, **values: str) -> str:
    if "session" in values:  # named as people name it: "alice", not the id "alice/"
        values["session"] = server_name(values["session"])
    return NOTICES[code].format(**values)


def reclaim_json(r: ReclaimRecord, t: dt.datetime | None = None) -> dict[str, Any]:
    t = t or utcnow()
    end = r.finished_at or r.t
    freed = freed_gpu_hours(r.gpus, end, t) if r.outcome == "stopped" else 0.0
    why = reclaimed_why(r)
    return {"id": r.id, "session": r.session, "user": r.session.split("/", 1)[0],
            "server": r.session.split("/", 1)[1], "rule": r.rule, "t": r.t, "gpus": r.gpus,
            "outcome": r.outcome, "finished_at": r.finished_at, "detail": r.detail,
            "by": r.recorded.by, "gpu_hours_freed": round(freed, 2),
            "why": why.text(t), "why_parts": why.parts_json(t), "kept": KEEPS, "lost": LOSES,
            "ran": r.ran.shown() if r.ran is not None else None,
            "saved": r.saved.shown() if r.saved is not None else None}


def audit_json(a: AuditRecord) -> dict[str, Any]:
    """An audit record as the admin API and the admin page's data write it: its fields."""
    return dataclasses.asdict(a)


def reclaimed_why(r: ReclaimRecord) -> Sentence:
    """Why the reclaim `r` happened, from what its record kept (`Recorded`)."""
    facts = r.recorded
    return why(r.rule, facts.measured, facts.idle_since, facts.by)


def reclaim_notice(r: ReclaimRecord) -> Sentence:
    """What the hub's home page tells a user about the reclaim `r` of their server, until
    they have seen it."""
    server = f"Your server {r.session.split('/', 1)[1]!r}" if r.session.split("/", 1)[1] else "Your server"
    return sentence(f"{server} was stopped at ", r.finished_at or r.t, ": ", reclaimed_why(r),
                    f". Kept: {KEEPS}. Lost: {LOSES}.")


#: an RFC 3339 instant inside free text (a decision's reason)
_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


def when(value: Any) -> Markup:
    """A time as the pages show it: a `<time>` holding the instant with `wording.clock` as
    its text ("13:33 UTC") and the full UTC time on hover, then how soon or how long ago
    (`wording.relative`: "(in 18 min)"); the pages' script shows the clock in the browser's
    zone ("08:33"). Anything that is not a time (a server named like one, malformed stored
    evidence) is shown as written, escaped."""
    t = parse_time_lenient(value)
    if t is None:
        return Markup("{}").format("" if value is None else value)
    now = utcnow()
    rel = relative(t, now)
    return Markup('<time datetime="{}" title="{}">{}</time>{}').format(
        format_time(t), exact_utc(t), clock(t, now), f" ({rel})" if rel else "")


def say(words: Sentence) -> Markup:
    """A sentence on a page: its words escaped, its times as `when` shows them."""
    return Markup("").join(when(p) if isinstance(p, dt.datetime) else escape(p) for p in words.parts)


def readable(text: Any) -> Markup:
    """Free text (a decision's reason, a notice) escaped, its RFC 3339 instants shown as
    `when` shows times, not "2026-12-03T07:22:16.452204+00:00"."""
    return Markup(_INSTANT.sub(lambda m: str(when(m.group(0))), str(escape("" if text is None else text))))


def state_of(info: SessionStatus, now: dt.datetime) -> tuple[str, Sentence]:
    """(kind, words) of a session's reclaim state, as the pages and the API say it."""
    if info.stopping:
        return "stopping", sentence("stopping")
    if info.exempt_until or info.rule == "exempt":
        until = info.exempt_until
        return "exempt", sentence("exempt until ", until) if until else sentence("exempt")
    if info.intent_until and info.intent_until > now:  # a new intent ends the warning
        return "kept", sentence("kept alive until ", info.intent_until)
    if info.warned_at and info.reclaim_at:
        return "warned", sentence("warned: reclaim at ", info.reclaim_at)
    if info.action == "hold":
        return "held", sentence("held: data missing")  # what is missing: the reason beside it
    if not info.gpus:
        return "cpu", sentence("no GPU")
    since = info.idle_since
    if info.rule in IDLE_RULES and since:
        # where the why (why_of) says since when, in the rule's words, the state does not repeat it
        return "idle", sentence("idle") if info.rule in SAID else sentence("idle since ", since)
    return "active", sentence("active")


def why_of(info: SessionStatus, kind: str) -> Sentence | None:
    """Why a session is in its state, in plain words, for a warned or an idle session; None
    when its latest decision is not one of those (a warned session whose data went missing
    is held: the hold says why)."""
    return why(info.rule, info.measured, info.idle_since) if kind in ("warned", "idle") and info.rule in SAID else None


def session_json(info: SessionStatus, now: dt.datetime) -> dict[str, Any]:
    """A session as the API and the admin page give it: its status (without the server's
    URL) and its state."""
    kind, words = state_of(info, now)
    reason = why_of(info, kind)
    return {**{k: v for k, v in info.to_dict().items() if k != "url"}, "state": kind,
            "state_text": words.text(now), "why": reason.text(now) if reason else None,
            "why_parts": reason.parts_json(now) if reason else None,
            "util_text": format_util(info.util_now), "gpus_text": in_words(info.kinds),
            "spark_label": spark_label(info.spark, info.idle_threshold, SPARK_WINDOW)}


def gpus_held(kinds: Mapping[str, int]) -> str:
    """A running session's GPUs by kind (`SessionStatus.kinds`) where a page writes them under
    the heading "GPUs" (its card, the admin page's column): the number alone for whole GPUs,
    as ever; MIG slices and shared GPUs by their names, as the waiting lines name them
    (node_gpus.in_words: "1 MIG slice", "1 GPU and 2 MIG slices")."""
    return str(kinds.get("gpu", 0)) if set(kinds) <= {"gpu"} else in_words(kinds)


def sparkline(values: list[float | None], threshold: float | None = None, width: int = 120,
              height: int = 24) -> str:
    """An inline SVG of utilization (0–100 %) over the last two hours (`status.SPARK_WINDOW`,
    oldest left), gaps where data is missing, the idle `threshold` (%) dashed; a baseline, not
    a box (a box reads as an input field). Only numbers go into it, so it is safe to include
    unescaped."""
    n = len(values)
    if not n:
        return ""
    step = width / max(1, n - 1)

    def y(v: float) -> float:
        return height - 1 - (min(100.0, max(0.0, float(v))) / 100.0) * (height - 2)

    segments: list[list[str]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            if segments[-1]:
                segments.append([])
            continue
        segments[-1].append(f"{i * step:.1f},{y(v):.1f}")
    # a lone sample (the first, or between gaps) is a dot: a polyline of one point draws nothing
    lines = "".join(f'<polyline points="{" ".join(s)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                    if len(s) > 1 else '<circle cx="{}" cy="{}" r="1.5" fill="currentColor"/>'.format(*s[0].split(","))
                    for s in segments if s)
    label = spark_label(values, threshold, SPARK_WINDOW)
    idle = ""
    if threshold is not None:
        idle = (f'<line class="idle-threshold" x1="0" x2="{width}" y1="{y(threshold):.1f}" y2="{y(threshold):.1f}" '
                f'stroke="#dc3545" stroke-width="1" stroke-dasharray="3 2"/>')
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{label}"><title>{label}</title>'
            f'<line x1="0" x2="{width}" y1="{height - 0.5}" y2="{height - 0.5}" stroke="#ccc"/>{idle}{lines}</svg>')


def sort_value(info: SessionStatus, now: dt.datetime) -> float:
    """Where a session's state sorts on the admin page (its `data-sort`): the most urgent
    first (a stop under way, then the warned by their reclaim time, the held, the idle by
    how long), then the kept, the exempt, the active."""
    kind = state_of(info, now)[0]
    rank = ("stopping", "warned", "held", "idle", "kept", "exempt", "active", "cpu").index(kind)
    at = {"warned": info.reclaim_at, "idle": info.idle_since, "kept": info.intent_until,
          "exempt": info.exempt_until}.get(kind)
    return rank * 1e11 + (at.timestamp() if at else 0)


def epoch(value: Any) -> str:
    """A time as the pages' tables sort it (`data-sort`): seconds since 1970; "" for none."""
    t = parse_time_lenient(value)
    return f"{t.timestamp():.0f}" if t else ""


def mean(values: Any) -> float | None:
    """The mean of the values that are there (a session's utilization per GPU); None for none."""
    there = [float(v) for v in values or () if v is not None]
    return sum(there) / len(there) if there else None


_DURATION_SETTINGS = frozenset(f.name for f in dataclasses.fields(PolicyConfig) if "timedelta" in str(f.type))


def setting_text(name: str, value: Any) -> str:
    """A policy setting's value, as the policy JSON writes it (durations in seconds), as
    people read it: "3 min" for idle_reclaim_after 180, "alice, bob", "none"."""
    if name in _DURATION_SETTINGS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_exact(value)
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


_jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True)
_jinja.filters.update(when=when, say=say, readable=readable, util=lambda values: format_util(values, missing="–"),
                      epoch=epoch, mean=mean, gpu_time=format_hours)
_jinja.globals.update(expected_free=expected_free, why_of=why_of, count=count, plural=plural, sort_value=sort_value,
                      server_name=server_name, setting_text=setting_text, gpus_in_words=in_words, kind_name=kind_name,
                      gpus_held=gpus_held,
                      SAVE_OUTCOME_WORDS=SAVE_OUTCOME_WORDS)
