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
from typing import Any, Mapping, Sequence

from tornado import web

from ..durations import parse_duration
from ..signals.pods import KEEPALIVE_ANNOTATION as ANNOTATION  # noqa: F401 (the pod annotation)

UTC = dt.timezone.utc
OPTION = "keepalive_until"  # the user_options key


class KeepaliveError(web.HTTPError, ValueError):
    """A bad keep-alive value: JupyterHub shows the spawn form again with this message
    (`jupyterhub_message`) and status 400."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)
        self.jupyterhub_message = message

    def __str__(self) -> str:
        return self.jupyterhub_message


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
  <legend style="font-size: 1em; font-weight: bold">Keep this session until</legend>
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


def _one(form: Mapping[str, Any], key: str) -> str:
    value = form.get(key, "")
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return str(value).strip()


def from_form(form: Mapping[str, Any], *, now: dt.datetime, max_keepalive: dt.timedelta,
              ) -> dt.datetime | None:
    """The "keep until" time the form asks for (UTC), or None; KeepaliveError when the
    value is not understood, in the past, or beyond `max_keepalive` from now."""
    choice = _one(form, "keepalive")
    if not choice:
        return None
    if choice == "until":
        text = _one(form, "keepalive_until")
        if not text:
            raise KeepaliveError("Choose the date and time to keep the session until.")
        try:
            local = dt.datetime.fromisoformat(text)
        except ValueError:
            raise KeepaliveError(f"{text!r} is not a date and time.") from None
        if local.tzinfo is None:
            offset = _one(form, "keepalive_tz_offset") or "0"
            try:
                minutes = int(float(offset))
            except ValueError:
                raise KeepaliveError(f"bad time zone offset {offset!r}") from None
            if abs(minutes) > 24 * 60:
                raise KeepaliveError(f"bad time zone offset {offset!r}")
            # getTimezoneOffset() is UTC minus local time, in minutes
            local = local.replace(tzinfo=UTC) + dt.timedelta(minutes=minutes)
        until = local.astimezone(UTC)
    else:
        try:
            until = now + parse_duration(choice)
        except ValueError:
            raise KeepaliveError(f"{choice!r} is not a duration.") from None
    return check(until, now=now, max_keepalive=max_keepalive)


def check(until: dt.datetime, *, now: dt.datetime, max_keepalive: dt.timedelta) -> dt.datetime:
    if until <= now:
        raise KeepaliveError(f"The keep-alive time {until:%Y-%m-%d %H:%M} UTC is in the past.")
    if until > now + max_keepalive + dt.timedelta(minutes=1):  # a minute of slack for the form's round trip
        latest = now + max_keepalive
        raise KeepaliveError(f"A session can be kept at most {_label(max_keepalive)} from now "
                             f"(until {latest:%Y-%m-%d %H:%M} UTC).")
    return min(until, now + max_keepalive)


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
        raise KeepaliveError(f"{OPTION} must be an ISO 8601 time, not {value!r}")
    try:
        until = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise KeepaliveError(f"{OPTION} must be an ISO 8601 time, not {value!r}") from None
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    if until <= now:
        return None
    return check(until.astimezone(UTC), now=now, max_keepalive=max_keepalive)


def iso(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
