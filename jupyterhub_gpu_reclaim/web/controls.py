"""What users and admins change, for the pages' forms and the JSON API alike: a user keeps
their session alive, clears its intent or stops it; an admin reclaims a session now, exempts
it, clears its intent or retries a stuck stop.

Each change is checked first (bad input: `BadInput`, 400; someone else's or no session: 404;
a stop already under way: 409; nothing changed then), recorded in the store with its audit
record, and shown at once in the latest cycle's status; the next cycle decides with it.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Protocol

from tornado import web

from ..wording import server_name
from ..service.status import CycleStatus, SessionStatus, WaitingServer
from ..service.stops import Stops
from ..store import Store
from ..store.reclaims import ReclaimRecord
from ..durations import format_duration
from ..timestamps import format_time, utcnow
from .inputs import BadInput
from .render import notice

log = logging.getLogger("jupyterhub_gpu_reclaim.web")

ADMIN_ACTIONS = ("reclaim", "exempt", "clear-intent", "retry-stop")
MAX_EXEMPT_HOURS = 24 * 14


class Reclaiming(Protocol):
    """What the controls use of the running service (`service.Reclaimer`)."""

    status: CycleStatus
    stops: Stops


class Controls:
    def __init__(self, store: Store, reclaimer: Reclaiming | None, max_keepalive: dt.timedelta) -> None:
        self.store, self.reclaimer, self.max_keepalive = store, reclaimer, max_keepalive

    # ---- what there is

    def status(self) -> CycleStatus:
        return self.reclaimer.status if self.reclaimer is not None else CycleStatus()

    def sessions_of(self, user: str) -> dict[str, SessionStatus]:
        return {sid: s for sid, s in self.status().sessions.items() if s.user == user}

    def waiting_of(self, user: str) -> list[WaitingServer]:
        return [q for q in self.status().queue if q.user == user]

    def own_session(self, user: str, sid: str) -> SessionStatus:
        """`user`'s running session `sid`; 404 for anyone else's (or none)."""
        info = self.sessions_of(user).get(sid)
        if info is None:
            raise web.HTTPError(404, f"no running session {sid!r} of yours")
        return info

    def reclaims_to_tell(self, user: str, days: int = 7) -> list[ReclaimRecord]:
        """`user`'s GPU servers reclaimed in the last `days` whose notice they have not seen,
        the latest per server, for servers not running or waiting again."""
        here = {*self.sessions_of(user), *(q.session for q in self.waiting_of(user))}
        latest = {r.session: r for r in self.store.unseen_reclaims(user, utcnow() - dt.timedelta(days=days))}
        return [r for sid, r in latest.items() if sid not in here]

    # ---- a user's

    def reclaim_seen(self, user: str, reclaim_id: int) -> str:
        """`user` has seen the notice of their reclaim `reclaim_id`: its session (404 for
        anyone else's, or one seen before)."""
        session = self.store.mark_seen(user, reclaim_id, utcnow())
        if session is None:
            raise web.HTTPError(404, f"no reclaim {reclaim_id} of yours to mark seen")
        return session

    def keep_alive(self, user: str, sid: str, until: dt.datetime) -> dt.datetime:
        """Keep `user`'s session alive until `until` (at most max_keepalive from now)."""
        self.own_session(user, sid)
        t = utcnow()
        cap = self.max_keepalive
        if until <= t:
            raise BadInput(f"the time {format_time(until)} is in the past")
        if until > t + cap + dt.timedelta(minutes=1):
            raise BadInput(f"{format_time(until)} is beyond the cap: at most {format_duration(cap.total_seconds())} "
                           f"from now ({format_time(t + cap)})")
        until = min(until, t + cap)
        self.store.set_intent(sid, until, t, by=user)
        self.store.audit(user, "keepalive", sid, t=t, until=until)
        self.status().amend(sid, intent_until=until, intent_set_at=t)
        log.info("%s keeps %s alive until %s", user, server_name(sid), format_time(until))
        return until

    def clear_intent(self, actor: str, sid: str) -> bool:
        """Clear the session's intent (the caller checked who may); False when it had none."""
        t = utcnow()
        cleared = self.store.clear_intent(sid, t)
        self.store.audit(actor, "clear-intent", sid, t=t, cleared=cleared)
        self.status().amend(sid, intent_until=None)
        return cleared

    def stop(self, user: str, sid: str) -> None:
        """`user` stops their own session now (not recorded as a reclaim)."""
        self.own_session(user, sid)
        if not self._stop_now(sid, by=user, record=False):
            raise web.HTTPError(409, f"{sid} is already being stopped")
        self.store.audit(user, "stop", sid)

    # ---- an admin's

    def admin_action(self, admin: str, action: Any, sid: Any, hours: Any = None) -> str:
        """One of ADMIN_ACTIONS on session `sid` by `admin`; returns the notice to show."""
        if action not in ADMIN_ACTIONS:
            raise BadInput(f"action must be one of {', '.join(ADMIN_ACTIONS)}, not {action!r}")
        if not isinstance(sid, str) or "/" not in sid:
            raise BadInput(f"session must be USER/SERVER, not {sid!r}")
        running = sid in self.status().sessions
        if action == "reclaim":
            if not running:
                raise web.HTTPError(404, f"no running session {sid!r}")
            if not self._stop_now(sid, by=admin, record=True):
                raise web.HTTPError(409, f"a stop of {sid} is already under way")
            self.store.audit(admin, "reclaim", sid)
            return notice("reclaiming", session=sid)
        if action == "exempt":
            until = self._exempt(admin, sid, hours, running)
            return notice("exempt", session=sid, until=format_time(until))
        if action == "clear-intent":
            if not running and sid not in self.store.intents():
                raise web.HTTPError(404, f"no session {sid!r} with an intent")
            cleared = self.clear_intent(admin, sid)
            return notice("intent-cleared" if cleared else "no-intent", session=sid)
        # retry-stop
        if not any(r.session == sid for r in self.store.stuck_reclaims()):
            raise web.HTTPError(404, f"no stuck stop of {sid!r}")
        if self.reclaimer is None or not self.reclaimer.stops.retry_stuck(sid):
            raise web.HTTPError(409, f"a stop of {sid} is already under way")
        self.store.audit(admin, "retry-stop", sid)
        return notice("retrying", session=sid)

    def _exempt(self, admin: str, sid: str, hours: Any, running: bool) -> dt.datetime:
        try:
            h = float(hours)
        except (TypeError, ValueError):
            raise BadInput(f"hours must be a number, not {hours!r}") from None
        if not 0 < h <= MAX_EXEMPT_HOURS:
            raise BadInput(f"hours must be in (0, {MAX_EXEMPT_HOURS}], not {h:g}")
        if not running:
            raise web.HTTPError(404, f"no running session {sid!r}")
        t = utcnow()
        until = t + dt.timedelta(hours=h)
        self.store.set_exemption(sid, until, t, by=admin)
        self.store.audit(admin, "exempt", sid, t=t, hours=h, until=until)
        self.status().amend(sid, exempt_until=until, exempt_by=admin)
        return until

    def _stop_now(self, sid: str, *, by: str, record: bool) -> bool:
        """Begin the stop (through the hub, as every stop); False when one is under way."""
        if self.reclaimer is None:
            return False
        user, _, server = sid.partition("/")
        info = self.status().sessions.get(sid)
        if not self.reclaimer.stops.stop_now(user, server, by=by, gpus=info.gpus if info else 0, record=record):
            return False
        self.status().amend(sid, stopping=True)
        return True
