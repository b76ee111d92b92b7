""""Keep this session until": the spawn-form control and its validation.

The form sends `keepalive` (a duration such as "4h", or "until") and, for "until",
`keepalive_until` (an HTML datetime-local value, the browser's local time) with
`keepalive_tz_offset` (minutes, JavaScript's `Date.getTimezoneOffset()`, filled in by the
page; without JavaScript the time is read as UTC). The result travels in `user_options`
as `keepalive_until`, an ISO 8601 UTC time, and ends on the pod as an annotation the
reclaim service reads as the session's first intent.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from typing import Any, Mapping, Sequence

from tornado import web

from ..durations import parse_duration
from ..timestamps import format_time
from ..wording import clock

UTC = dt.timezone.utc
OPTION = "keepalive_until"  # the user_options key
ROUND_TRIP = dt.timedelta(minutes=1)  # slack beyond max_keepalive for the form's round trip


class KeepaliveError(web.HTTPError, ValueError):
    """A bad keep-alive value: JupyterHub shows the spawn form again with this message
    (`jupyterhub_message`) and status 400."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)
        self.jupyterhub_message = message

    def __str__(self) -> str:
        return self.jupyterhub_message


LEGEND = "Keep this session until"  # the form's control, which a refused link points to


def _label(td: dt.timedelta) -> str:
    hours = td.total_seconds() / 3600
    if hours >= 1 and hours == int(hours):
        return f"{int(hours)} hour{'s' if hours != 1 else ''}"
    return f"{int(td.total_seconds() // 60)} minutes"


def form_html(choices: Sequence[str], max_keepalive: dt.timedelta) -> str:
    """The control, appended to the profile form. `choices` are durations ("2h")."""
    options = ['<option value="" selected>No: reclaim it when its GPU is idle</option>']
    for choice in choices:
        td = parse_duration(choice)
        if dt.timedelta(0) < td <= max_keepalive:
            options.append(f'<option value="{html.escape(choice)}">For {_label(td)}</option>')
    options.append('<option value="until">Until a time…</option>')
    cap = html.escape(_label(max_keepalive))
    return f"""
<fieldset class="gpu-reclaim-keepalive" style="margin-top: 1em">
  <legend style="font-size: 1em; font-weight: bold">{LEGEND}</legend>
  <p class="help-block">An idle GPU is given back to people waiting for one, after a warning.
    If you need this session to stay even while its GPU is idle, say for how long (at most {cap}).</p>
  <select name="keepalive" id="gpu-reclaim-keepalive" class="form-control"
          onchange="document.getElementById('gpu-reclaim-keepalive-until').hidden = this.value !== 'until'">
    {''.join(options)}
  </select>
  <div id="gpu-reclaim-keepalive-until" hidden style="margin-top: 0.5em">
    <input type="datetime-local" name="keepalive_until" class="form-control" aria-label="Keep until">
  </div>
  <input type="hidden" name="keepalive_tz_offset" id="gpu-reclaim-keepalive-tz">
  <script>document.getElementById('gpu-reclaim-keepalive-tz').value = new Date().getTimezoneOffset();</script>
</fieldset>
"""


def refuse_from_link(query: Mapping[str, Any]) -> None:
    """A spawn link (`/hub/spawn?opt-keepalive=4h`) asks for a keep-alive: KeepaliveError, so
    that JupyterHub shows the form instead of starting. Anyone can send a user a link, and
    a click must not hold a GPU for hours: a keep-alive comes from the form, the REST API
    (the user's token) or the service's pages, never from a link alone."""
    if any(_one(query, key) for key in ("keepalive", OPTION)):
        raise KeepaliveError(f"A link cannot keep a session alive: choose “{LEGEND}” here, then start.")


def _one(form: Mapping[str, Any], key: str) -> str:
    value = form.get(key, "")
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return str(value).strip()


def _shown(value: Any) -> str:
    """A value as an error message quotes it: repr, cut short (it is the user's)."""
    text = repr(value)
    return text if len(text) <= 42 else text[:40] + "…"


def from_form(form: Mapping[str, Any], *, now: dt.datetime, max_keepalive: dt.timedelta,
              ) -> dt.datetime | None:
    """The "keep until" time the form asks for (UTC), or None; KeepaliveError when the
    value is not understood, in the past, or beyond `max_keepalive` from now."""
    choice = _one(form, "keepalive")
    if not choice:
        return None
    if choice != "until":
        try:
            duration = parse_duration(choice)
        except ValueError:
            raise KeepaliveError(f"{_shown(choice)} is not a duration.") from None
        if duration > max_keepalive + ROUND_TRIP:
            raise _too_far(now, max_keepalive)
        return check(now + duration, now=now, max_keepalive=max_keepalive)
    text = _one(form, "keepalive_until")
    if not text:
        raise KeepaliveError("Choose the date and time to keep the session until.")
    try:
        until = dt.datetime.fromisoformat(text)
    except ValueError:
        raise KeepaliveError(f"{_shown(text)} is not a date and time.") from None
    if until.tzinfo is None:
        # getTimezoneOffset() is UTC minus local time, in minutes
        offset = _one(form, "keepalive_tz_offset") or "0"
        try:
            minutes = float(offset)
        except ValueError:
            minutes = math.nan
        if not abs(minutes) < 24 * 60:  # NaN too
            raise KeepaliveError(f"bad time zone offset {_shown(offset)}")
        until = until.replace(tzinfo=dt.timezone(-dt.timedelta(minutes=minutes)))
    return check(until, now=now, max_keepalive=max_keepalive)


def _too_far(now: dt.datetime, max_keepalive: dt.timedelta) -> KeepaliveError:
    latest = now + max_keepalive
    return KeepaliveError(f"A session can be kept at most {_label(max_keepalive)} from now "
                          f"(until {clock(latest, now)}).")


def check(until: dt.datetime, *, now: dt.datetime, max_keepalive: dt.timedelta) -> dt.datetime:
    """`until` (aware, any time zone) within (now, now + max_keepalive], in UTC. Compared
    before it is converted: a time near datetime's limits (year 1 or 9999 with an offset)
    cannot be converted to UTC, and is refused as in the past or too far."""
    if until <= now:
        try:
            shown = clock(until, now)
        except OverflowError:
            shown = until.isoformat()
        raise KeepaliveError(f"The keep-alive time {shown} is in the past.")
    if until > now + max_keepalive + ROUND_TRIP:
        raise _too_far(now, max_keepalive)
    return min(until.astimezone(UTC), now + max_keepalive)


def from_user_options(options: Mapping[str, Any], *, now: dt.datetime,
                      max_keepalive: dt.timedelta) -> dt.datetime | None:
    """The keep-alive time in `user_options` (set by the form or the REST API), or None.
    A time already past is dropped: JupyterHub reuses a server's last user_options when a
    spawn gives none, so yesterday's value must not fail today's spawn. Anything else
    invalid raises KeepaliveError."""
    value = options.get(OPTION)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise KeepaliveError(f"{OPTION} must be an ISO 8601 time (a string), not {type(value).__name__}.")
    try:
        until = dt.datetime.fromisoformat(value)
    except ValueError:
        raise KeepaliveError(f"{OPTION} must be an ISO 8601 time, not {_shown(value)}.") from None
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    if until <= now:
        return None
    return check(until, now=now, max_keepalive=max_keepalive)


def format_keepalive(t: dt.datetime) -> str:
    """The keep-alive time as user_options and the pod annotation carry it: to the second."""
    return format_time(t.replace(microsecond=0))
