"""Why a session is warned or was reclaimed, in plain words of what was measured ("nothing
has run on the GPU since 13:22"): the warnings and reclaim notices (notify.py), the pages'
cards, banner and history, and the API's `why` (web/). Read from a decision's rule and its
evidence as people see it (`Decision.shown()`, the dict the store keeps with each warning
and reclaim); stored evidence is never trusted: a time that does not read is left out, never
an error. The rule's name never shows: it is the admin's word (the admin page, the logs).

A `Sentence` keeps its times as times, so each reader writes them its own way: the pages as
<time> in the browser's zone (web.render.say), text in UTC, saying so (`Sentence.text`)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from ..durations import format_duration
from ..timestamps import parse_time_lenient
from ..wording import format_util, moment

Part = Union[str, dt.datetime]


@dataclass(frozen=True)
class Sentence:
    """Words and times, in order."""

    parts: tuple[Part, ...]

    def text(self, now: dt.datetime) -> str:
        """As text where no browser converts the times: each as `wording.moment` ("13:22 UTC
        (11 min ago)")."""
        return "".join(p if isinstance(p, str) else moment(p, now) for p in self.parts)


def sentence(*parts: Part | Sentence) -> Sentence:
    """Parts and sentences joined into one."""
    out: list[Part] = []
    for p in parts:
        out.extend(p.parts if isinstance(p, Sentence) else (p,))
    return Sentence(tuple(out))


def _time(evidence: Mapping[str, Any], key: str) -> dt.datetime | None:
    value = evidence.get(key)
    return parse_time_lenient(value) if isinstance(value, str) else None


def _number(evidence: Mapping[str, Any], key: str) -> float | None:
    value = evidence.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value < 1e9 else None


def _since(t: dt.datetime | None) -> Sentence:
    return sentence(" since ", t) if t is not None else sentence(" since the server started")


#: the rules `why` has words of their own for (the others: a general sentence)
SAID = frozenset({"gpu-never-used", "gpu-idle", "shared-gpu-idle-kernels", "cpu-work-on-gpu",
                  "job-ended-unattended", "intent-ended", "max-age", "admin", "idle-culler-timeout",
                  "idle-culler-max-age"})


def why(rule: str | None, evidence: Mapping[str, Any] | None) -> Sentence:
    """Why a warning, a reclaim or an idle state: what was measured, for the user."""
    ev = evidence if isinstance(evidence, Mapping) else {}
    since = _time(ev, "idle_since")
    if rule == "gpu-never-used":
        cell = _time(ev, "last_busy_kernel")
        if cell is not None and since is not None and cell >= since:
            return sentence("the GPU has not been used since the server started, and no cell has run since ", cell)
        return sentence("nothing has run on the GPU", _since(since))
    if rule == "gpu-idle":
        peak, window = ev.get("window_max_util"), _number(ev, "window_minutes")
        over = (f"; its highest use in the last {format_duration(window * 60)} was {format_util(peak)}"
                if peak and window else "")
        return sentence("the GPU has not been used", _since(since), over)
    if rule == "shared-gpu-idle-kernels":
        return sentence("no kernel or terminal of this server has run", _since(since),
                        " (its GPU is shared, so only the server's own work counts)")
    if rule == "cpu-work-on-gpu":
        return sentence("only CPU work has run", _since(_time(ev, "cpu_work_since")),
                        ", and the GPU has not been used since the server started: a profile without a GPU would do")
    if rule == "job-ended-unattended":
        seen = _time(ev, "last_seen")
        return sentence("the work on the GPU ended", *((" at ", since) if since else ()),
                        *((", and nobody has been active since ", seen) if seen else ()))
    if rule == "intent-ended":
        end = _time(ev, "intent_end")
        return sentence(*(("kept alive only until ", end, ", and ") if end else ()),
                        "the GPU has not been used", _since(since))
    if rule == "max-age":
        end = _time(ev, "max_age_at")
        return sentence("the session reaches the longest time a server may run",
                        *((" at ", end) if end else ()))
    if rule == "admin":
        by = ev.get("by")
        return sentence(f"an admin ({by}) reclaimed it" if isinstance(by, str) and by else "an admin reclaimed it")
    if rule == "idle-culler-timeout":
        last = _time(ev, "hub_last_activity")
        inactive = _number(ev, "inactive_s")
        if last is not None:
            return sentence("no activity since ", last)
        if inactive is not None:
            return sentence(f"no activity for {format_duration(inactive)}")
        return sentence("no activity for longer than allowed")
    if rule == "idle-culler-max-age":
        return sentence("the server has run for the longest time a server may run")
    return sentence("the reclaim policy found the GPU unused")
