"""The HTML pages and forms: the user page, keep-alive and stop, the hub-template embeds
(home panel and banner), and the admin page, its actions, its what-if and its usage report."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote, urlencode

from tornado import web

from ..replay import interruptions
from ..report.formats import HOURS, as_csv, as_json, estimate_sentence, headings, long_idle, queue_sentence, totals_sentence
from ..replay.backtest import policy_to_dict
from ..service.daily_hours import FREED_MEANS, WAITING_MEANS
from ..durations import format_duration
from ..timestamps import format_time, utcnow
from .base import Base, writes
from .chart import report_chart, whatif_chart
from .inputs import BadInput, local_time_to_utc, parse_days, parse_override, parse_until
from .render import notice, reclaim_json, reclaim_notice, reclaimed_why, state_of, why_of
from .report_view import LEADERBOARD_SIZE, day_rows, idle_leaderboard, share_used
from .way_back import start_again_url
from .usage_report import DAYS_DEFAULT, DAYS_MAX, DAYS_OFFERED, SOURCES, WAITS_FROM_PROMETHEUS, days_csv, usage_report
from .whatif_runner import DEFAULT_SINCE, run_what_if


class UserPage(Base):
    template = "user.html"

    @web.authenticated
    def get(self) -> None:
        self.show()

    def show(self, error: str = "", status: int = 200) -> None:
        selected = self.get_argument("session", "")
        sessions = sorted(self.my_sessions().values(), key=lambda s: (s.server != "", s.server))
        cap = self.ctx.max_keepalive
        presets: list[float] = [h for h in (1, 2, 4, 8, 12, 24, 48) if dt.timedelta(hours=h) <= cap] or [cap.total_seconds() / 3600]
        t = utcnow()
        records = self.user_reclaims()
        # Start again: the latest stop of each server that is not running again
        latest: dict[str, int] = {}
        running = {s.session for s in sessions}
        for r in records:
            if r.outcome == "stopped" and r.session not in running:
                latest.setdefault(r.session, r.id)
        reclaims = [(reclaim_json(r, t), reclaimed_why(r),
                     start_again_url(self.ctx.hub_prefix, r.session, r.ran) if latest.get(r.session) == r.id else None)
                    for r in records]
        self.set_status(status)
        self.finish(self.render_page(self.template, sessions=sessions, queue=self.my_queue(),
                                     reclaims=reclaims, selected=selected, error=error,
                                     notice=self.take_notice(), presets=presets,
                                     cap_text=format_duration(cap.total_seconds()), cycle_t=self.ctx.controls.status().t))


class KeepalivePage(Base):
    """The link of the warning messages: the user page with the session selected."""

    @web.authenticated
    def get(self) -> None:
        session = self.get_argument("session", "")
        if not session:  # the notices link here without one: select the warned session
            t = utcnow()
            warned = [sid for sid, s in sorted(self.my_sessions().items()) if state_of(s, t)[0] == "warned"]
            session = warned[0] if warned else ""
        target = self.ctx.prefix + ("?" + urlencode({"session": session}) + "#s-" + quote(session, safe="")
                                    if session else "")
        self.redirect(target)


class KeepaliveForm(UserPage):
    @writes
    def post(self) -> None:
        sid = self.get_argument("session", "")
        nxt = self.next_page()
        if self.embedded:
            self.template = "embed_home.html"
        try:
            self.own_session(sid)
            duration = self.get_argument("duration", "")
            at = self.get_argument("until_time", "")
            if at:
                until = local_time_to_utc(at, self.get_argument("tz_offset", "0"))
            elif duration:
                until = parse_until({"duration": duration}, self.ctx.max_keepalive)
            else:
                raise BadInput("choose a duration or a time")
            until = self.ctx.controls.keep_alive(self.user_name, sid, until)
        except BadInput as e:
            self.show(error=f"{sid}: {e}", status=400)
            return
        self.flash(notice("kept", until=format_time(until)))
        self.redirect(nxt + "?" + urlencode({"session": sid}), status=303)


class StopForm(UserPage):
    @writes
    def post(self) -> None:
        sid = self.get_argument("session", "")
        nxt = self.next_page()
        self.ctx.controls.stop(self.user_name, sid)
        self.flash(notice("stopping", session=sid))
        self.redirect(nxt, status=303)


class EmbedHome(UserPage):
    """For the hub's home page (an iframe): what became of servers reclaimed since the
    user's last look, the sessions, their state and keep-alive."""

    template = "embed_home.html"
    embedded = True

    def render_page(self, name: str, **ns: Any) -> str:
        user = self.user_name
        reclaimed = [{"id": r.id, "text": reclaim_notice(r), "session": r.session,
                      "ran": r.ran.shown() if r.ran is not None else None}
                     for r in self.ctx.controls.reclaims_to_tell(user)]
        return super().render_page(name, reclaimed=reclaimed, **ns)


class ReclaimSeenForm(Base):
    """The home page's notice of a reclaim: **Start again** (the hub's spawn page, in the
    top window) or **Dismiss**; either way the user has seen it."""

    embedded = True

    @writes
    def post(self) -> None:
        try:
            reclaim_id = int(self.get_argument("reclaim", ""))
        except ValueError:
            raise web.HTTPError(400, "reclaim: the number of a reclaim") from None
        then = self.get_argument("then", "")
        if then not in ("start", "dismiss"):
            raise web.HTTPError(400, f"then: start or dismiss, not {then!r}")
        ran = next((r.ran for r in self.ctx.controls.reclaims_to_tell(self.user_name) if r.id == reclaim_id), None)
        session = self.ctx.controls.reclaim_seen(self.user_name, reclaim_id)
        # the hub's spawn page (the start of that server, with its resume priority), then the lab
        self.redirect(start_again_url(self.ctx.hub_prefix, session, ran) if then == "start"
                      else self.ctx.prefix + "embed/home", status=303)


class EmbedBanner(Base):
    """For every hub page (an iframe in the announcement block): a banner when warned."""

    embedded = True

    def get(self) -> None:
        # never an OAuth dance for the banner (one per hub page): before the user's first
        # visit to the service (the home page's panel logs in) there is no login cookie, and
        # the banner is empty, not refused: a 403 here was an error in the console and the
        # log for every hub page a new user opened
        t = utcnow()
        warned = [] if self.current_user is None else [
            {**s.to_dict(), "why": why_of(s, "warned")} for s in self.my_sessions().values()
            if state_of(s, t)[0] == "warned"]
        self.finish(self.render_page("embed_banner.html", warned=warned))


class AdminPage(Base):
    @web.authenticated
    def get(self) -> None:
        self.require_admin()
        self.show_admin(notice=self.take_notice())


class AdminActionForm(Base):
    """Admin actions from the page: a confirmation page first (works without JS), then the action."""

    @web.authenticated
    def post(self) -> None:
        self.require_admin()
        action = self.get_argument("action", "")
        sid = self.get_argument("session", "")
        hours = self.get_argument("hours", None)
        if self.get_argument("confirm", "") != "yes":
            # the session as the page showed it: its keep-alive and exemption, which the action overrides
            info = self.ctx.controls.status().sessions.get(sid)
            self.finish(self.render_page("confirm.html", action=action, session=sid, hours=hours, info=info))
            return
        try:
            message = self.ctx.controls.admin_action(self.actor, action, sid, hours)
        except BadInput as e:
            self.set_status(400)
            self.show_admin(error=str(e))
            return
        self.flash(message)
        self.redirect(self.ctx.prefix + "admin", status=303)


class AdminWhatIfForm(Base):
    """The what-if: the recorded history under the live policy and under an override (a
    form of `setting: value` lines), side by side with a chart. It changes nothing, so the
    form sends GET: a what-if's address (its period and settings) can be bookmarked and
    shared; without them, the form alone. One at a time, in a process of its own
    (web.whatif_runner), as from the API."""

    FIELDS = ("since", "until", "override")

    @web.authenticated
    async def get(self) -> None:
        self.require_admin()
        if not any(k in self.request.arguments for k in self.FIELDS):
            self.show({"since": DEFAULT_SINCE, "until": "", "override": ""})
            return
        form = {k: self.get_argument(k, "") for k in self.FIELDS}
        try:
            result = await run_what_if(self, form["since"], form["until"], parse_override(form["override"]))
        except BadInput as e:
            self.show(form, error=str(e), status=400)
            return
        self.show(form, result=result)

    def show(self, form: dict[str, str], *, result: Any = None, error: str = "", status: int = 200) -> None:
        live = self.ctx.settings.rules
        self.set_status(status)
        self.finish(self.render_page("whatif.html", form=form, result=result, error=error,
                                     form_query=urlencode({k: v for k, v in form.items() if v}),
                                     chart=whatif_chart(result) if result is not None else "",
                                     settings=policy_to_dict(live.base), rules=live.names,
                                     returned_labels=interruptions.LABELS))


class AdminReportPage(Base):
    """The usage report (`usage_report`): `?days=N` (1 to DAYS_MAX), `?format=` html (the
    page), csv or json (a download: the command's --csv and --json, each row and day with
    its source). Bad input: 400, nothing read."""

    FORMATS = ("html", "csv", "days-csv", "json")

    @web.authenticated
    async def get(self) -> None:
        self.require_admin()
        fmt = self.get_argument("format", "html")
        try:
            days = parse_days(self.get_argument("days", str(DAYS_DEFAULT)), DAYS_MAX)
            if fmt not in self.FORMATS:
                raise BadInput(f"format: one of {', '.join(self.FORMATS)}, not {fmt!r}")
        except BadInput as e:
            self.set_status(400)
            self.finish(self.render_page("report.html", report=None, error=str(e), days=DAYS_DEFAULT,
                                         offered=DAYS_OFFERED))
            return
        assert self.ctx.store is not None  # web.app mounts the pages only with a store
        report = await usage_report(self.ctx.store, self.ctx.settings, utcnow(), days)
        name = f"gpu-usage-{report['by_day'][0]['day']}-to-{report['by_day'][-1]['day']}"
        if fmt != "html":
            body, kind, file = {"csv": (as_csv(report, extra=("source",)), "text/csv; charset=utf-8", f"{name}.csv"),
                                "days-csv": (days_csv(report), "text/csv; charset=utf-8", f"{name}-days.csv"),
                                "json": (as_json(report), "application/json", f"{name}.json")}[fmt]
            self.set_header("Content-Type", kind)
            self.set_header("Content-Disposition", f'attachment; filename="{file}"')
            self.finish(body)
            return
        self.finish(self.render_page("report.html", report=report, error="", days=days, offered=DAYS_OFFERED,
                                     chart=report_chart(report), totals=totals_sentence(report),
                                     hours=HOURS, headings=headings(report), long=long_idle(report),
                                     sources=SOURCES, freed_means=FREED_MEANS, waiting_means=WAITING_MEANS,
                                     day_rows=day_rows, share_used=share_used, idle_leaderboard=idle_leaderboard,
                                     leaders_max=LEADERBOARD_SIZE,
                                     waits_known=WAITS_FROM_PROMETHEUS,
                                     queue=queue_sentence(report["queue"]) if report["queue"] else "",
                                     estimate=estimate_sentence(report["policy_estimate"])
                                     if report["policy_estimate"] else ""))
