"""Why a session is warned or was reclaimed, in plain words of what was measured ("nothing
has run on the GPU since 13:22"): the warnings and reclaim notices (notify.py), the pages'
cards, banner and history, and the API's `why` (web/). Read from a decision's rule and its
typed facts (`policy.evidence`: a live decision's, or a stored reclaim's `Recorded`, where
what does not read is left out, never an error). The rule's name never shows: it is the
admin's word (the admin page, the logs).

A `Sentence` keeps its times as times, so each reader writes them its own way: the pages as
<time> in the browser's zone (web.render.say), text in UTC, saying so (`Sentence.text`), the
JupyterLab extension from typed parts (`Sentence.parts_json`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Union

from ..durations import format_duration
from ..policy.evidence import Measured
from ..timestamps import format_time
from ..wording import clock, exact_utc, format_util, moment, relative

Part = Union[str, dt.datetime]


@dataclass(frozen=True)
class Sentence:
    """Words and times, in order."""

    parts: tuple[Part, ...]

    def text(self, now: dt.datetime) -> str:
        """As text where no browser converts the times: each as `wording.moment` ("13:22 UTC
        (11 min ago)")."""
        return "".join(p if isinstance(p, str) else moment(p, now) for p in self.parts)

    def parts_json(self, now: dt.datetime) -> list[dict[str, str]]:
        """For a reader that writes the times in its own zone (the JupyterLab extension): the
        words as {"text"}, each time as the pages' <time> holds it (web.render.when):
        {"time": ISO 8601 with its offset, "text": its UTC clock, "title": in full UTC,
        "relative": how soon or how long ago, or ""}."""
        return [{"text": p} if isinstance(p, str) else
                {"time": format_time(p), "text": clock(p, now), "title": exact_utc(p), "relative": relative(p, now)}
                for p in self.parts]


def sentence(*parts: Part | Sentence) -> Sentence:
    """Parts and sentences joined into one."""
    out: list[Part] = []
    for p in parts:
        out.extend(p.parts if isinstance(p, Sentence) else (p,))
    return Sentence(tuple(out))


def _since(t: dt.datetime | None) -> Sentence:
    return sentence(" since ", t) if t is not None else sentence(" since the server started")


#: the rules `why` has words of their own for (the others: a general sentence)
SAID = frozenset({"gpu-never-used", "gpu-idle", "shared-gpu-idle-kernels", "cpu-work-on-gpu",
                  "job-ended-unattended", "intent-ended", "max-age", "admin", "idle-culler-timeout",
                  "idle-culler-max-age"})


def why(rule: str | None, measured: Measured, idle_since: dt.datetime | None = None,
        by: str | None = None) -> Sentence:
    """Why a warning, a reclaim (`by` an admin) or an idle state: what was measured, for the user."""
    m, since = measured, idle_since
    if rule == "gpu-never-used":
        cell = m.last_busy_kernel
        if cell is not None and since is not None and cell >= since:
            return sentence("the GPU has not been used since the server started, and no cell has run since ", cell)
        return sentence("nothing has run on the GPU", _since(since))
    if rule == "gpu-idle":
        peak, window = m.window_max_util, m.window
        over = (f"; its highest use in the last {format_duration(window.total_seconds())} was {format_util(peak)}"
                if peak and window else "")
        return sentence("the GPU has not been used", _since(since), over)
    if rule == "shared-gpu-idle-kernels":
        return sentence("no kernel or terminal of this server has run", _since(since),
                        " (its GPU is shared, so only the server's own work counts)")
    if rule == "cpu-work-on-gpu":
        return sentence("only CPU work has run", _since(m.cpu_work_since),
                        ", and the GPU has not been used since the server started: a profile without a GPU would do")
    if rule == "job-ended-unattended":
        seen = m.last_seen
        return sentence("the work on the GPU ended", *((" at ", since) if since else ()),
                        *((", and nobody has been active since ", seen) if seen else ()))
    if rule == "intent-ended":
        end = m.intent_end
        return sentence(*(("kept alive only until ", end, ", and ") if end else ()),
                        "the GPU has not been used", _since(since))
    if rule == "max-age":
        end = m.max_age_at
        return sentence("the session reaches the longest time a server may run",
                        *((" at ", end) if end else ()))
    if rule == "admin":
        return sentence(f"an admin ({by}) reclaimed it" if by else "an admin reclaimed it")
    if rule == "idle-culler-timeout":
        if m.hub_last_activity is not None:
            return sentence("no activity since ", m.hub_last_activity)
        if m.inactive is not None:
            return sentence(f"no activity for {format_duration(m.inactive.total_seconds())}")
        return sentence("no activity for longer than allowed")
    if rule == "idle-culler-max-age":
        return sentence("the server has run for the longest time a server may run")
    return sentence("the reclaim policy found the GPU unused")
