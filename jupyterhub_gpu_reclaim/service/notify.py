"""Notifications: tell users (and admins) about warnings and reclaims.

A :class:`Message` is built from a policy :class:`~.observations.Decision` ("warn" or
"reclaim") and its :class:`~.observations.Session`. It names the session, says why in plain
words of what was measured (`reasons.why`: never the rule's name) and what was measured, the
reclaim time (in UTC, saying so, and how soon: `wording.moment`), how to keep the session
(the keep-alive page) and what a reclaim keeps and loses.

Channels are pluggable :class:`Notifier` objects (``async send(message, recipients)``):
:class:`LogNotifier`, :class:`WebhookNotifier` (JSON, or Slack incoming-webhook ``{"text"}``)
and :class:`EmailNotifier` (SMTP through aiosmtplib). A :class:`Dispatcher` decides who gets
a message (the user, a copy to admins, dry-run routing), runs every channel, and logs and
counts a failing channel without stopping the others or raising.

Secrets stay out of logs: the SMTP password is never logged, and a webhook URL is logged as
``scheme://host/…`` only (Slack puts its token in the path, others in the query).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.errors
import email.utils
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from ..policy.evidence import Measured
from ..policy.observations import Decision, Session
from ..oneline import one_line
from ..durations import format_duration
from ..timestamps import format_time, utcnow
from ..wording import KEEPS, LOSES, clock, format_util, moment
from .reasons import why

log = logging.getLogger(__name__)

Event = Literal["warning", "reclaim"]

def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)


def _measured_lines(m: Measured, idle_since: dt.datetime | None, now: dt.datetime) -> list[str]:
    """What was measured, times as every text says them (`wording.moment`, in UTC)."""
    lines = []
    if idle_since is not None:
        lines.append(f"  - idle since: {moment(idle_since, now)}")
    if m.gpu_shared:  # its utilization is everyone's on the GPU: not the server's
        lines.append("  - the GPU is shared with other servers (time-sliced): its utilization is not "
                     "this server's alone, so only the server's kernels and terminals count")
    elif m.never_used:
        lines.append("  - the GPU has not been used since the server started")
    elif m.last_used is not None:
        lines.append(f"  - GPU last used: {moment(m.last_used, now)}")
    if m.window_max_util is not None and not m.gpu_shared:
        over = f" over the last {format_duration(m.window.total_seconds())}" if m.window else ""
        lines.append(f"  - highest GPU utilization{over}: {format_util(m.window_max_util)}")
    if m.latest_util is not None and not m.gpu_shared:
        lines.append(f"  - latest GPU utilization: {format_util(m.latest_util)}")
    if m.idle_gpus is not None and m.gpus:
        lines.append(f"  - idle GPUs: {len(m.idle_gpus)} of {m.gpus}")
    if m.hub_last_activity is not None:
        lines.append(f"  - last activity seen by the hub: {moment(m.hub_last_activity, now)}")
    if m.inactive is not None:
        lines.append(f"  - inactive for: {format_duration(m.inactive.total_seconds())}")
    if m.max_age_at is not None:
        lines.append(f"  - maximum age reached at: {moment(m.max_age_at, now)}")
    return lines


@dataclass(frozen=True)
class Message:
    """One notification, ready for any channel."""

    event: Event
    session: str  # "user/server"
    user: str
    server: str
    rule: str  # the admin's word (the webhook's JSON, the log); the text says `why`
    reason: str
    why: str  # in plain words of what was measured (reasons.why)
    reclaim_at: dt.datetime  # UTC
    now: dt.datetime  # UTC, when the message was built
    evidence: dict[str, Any]  # the decision's, shown (the webhook's JSON)
    keepalive_url: str
    hub_name: str
    dry_run: bool
    subject: str
    text: str

    @classmethod
    def build(cls, decision: Decision, session: Session, *, keepalive_url: str,
              hub_name: str = "JupyterHub", now: dt.datetime | None = None,
              dry_run: bool = False) -> Message:
        if decision.action == "warn":
            event: Event = "warning"
        elif decision.action == "reclaim":
            event = "reclaim"
        else:
            raise ValueError(f"no message for a {decision.action!r} decision")
        now = _utc(now or utcnow())
        reclaim_at = _utc(decision.reclaim_at or now)
        # names are the user's choice: one line each, in the subject (a header) and the text
        sid = one_line(session.id)
        server_label = f"server {session.server!r}" if session.server else "default server"  # repr: one line
        who = f"{one_line(session.user)}'s {server_label} ({sid})"
        gpus = f" with {session.gpus} GPU{'s' if session.gpus != 1 else ''}" if session.gpus else ""
        dry = "[dry run] " if dry_run else ""
        if event == "warning":
            subject = f"{dry}{hub_name}: your {server_label} ({sid}) will be stopped at {clock(reclaim_at, now)}"
            head = [f"{who}{gpus} will be stopped at {moment(reclaim_at, now)} to free its GPUs for others."]
            use_it = "use the GPU / run a cell before the reclaim time."
            keep = ["How to keep your session:"]
            if keepalive_url:  # none without the service's pages
                keep += [f"  Open {keepalive_url} and declare how long you need it (\"keep alive until\"),",
                         f"  or {use_it}"]
            else:
                keep += [f"  {use_it[0].upper()}{use_it[1:]}"]
        else:
            subject = f"{dry}{hub_name}: your {server_label} ({sid}) was stopped"
            head = [f"{who}{gpus} was stopped at {clock(reclaim_at, now)} to free its GPUs."]
            keep = ["You can start it again from the hub at any time."]
            if keepalive_url:
                keep += [f"Next time, to keep a session running, use {keepalive_url}."]
        why_text = why(decision.rule, decision.measured, decision.idle_since).text(now)
        body = [
            *head,
            "",
            one_line(f"Why: {why_text}."),
            "What was measured:",
            *([one_line(line) for line in _measured_lines(decision.measured, decision.idle_since, now)] or ["  - (none recorded)"]),
            "",
            *keep,
            "",
            "What a reclaim keeps and loses:",
            f"  Kept: {KEEPS}.",
            f"  Lost: {LOSES}.",
        ]
        if dry_run:
            body += ["", "This hub runs the reclaimer in dry-run mode: nothing is stopped."]
        return cls(event, session.id, session.user, session.server, decision.rule,
                   decision.reason, why_text, reclaim_at, now, decision.shown(), keepalive_url,
                   hub_name, dry_run, subject, "\n".join(body) + "\n")

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON document."""
        return {
            "event": self.event,
            "session": self.session,
            "user": self.user,
            "server": self.server,
            "rule": self.rule,
            "reason": self.reason,
            "why": self.why,
            "reclaim_at": format_time(self.reclaim_at),
            "evidence": self.evidence,
            "keepalive_url": self.keepalive_url,
            "hub": self.hub_name,
            "dry_run": self.dry_run,
            "text": f"{self.subject}\n\n{self.text}",
        }


@runtime_checkable
class Notifier(Protocol):
    """A notification channel. `recipients` are user names or e-mail addresses."""

    name: str

    async def send(self, message: Message, recipients: Sequence[str]) -> None: ...


class NotifyError(Exception):
    """A channel failed; the text carries no secret."""


def redact_url(url: str) -> str:
    """``https://hooks.slack.com/…``: scheme and host only, never the path or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}/…"


def slack_escape(text: str) -> str:
    """Text for Slack's mrkdwn, escaped as Slack documents ("Escaping text"): &, < and >
    only. What is left cannot form a mention (<!channel>, <@U…>) or a link (<url|label>)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class LogNotifier:
    """Writes each message to the log (always, even with no recipients)."""

    always = True

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO,
                 name: str = "log"):
        self.logger = logger or log
        self.level = level
        self.name = name

    async def send(self, message: Message, recipients: Sequence[str]) -> None:
        self.logger.log(self.level, "%s for %s (rule %s, reclaim at %s) to %s: %s",
                        message.event, one_line(message.session), message.rule,
                        format_time(message.reclaim_at), one_line(", ".join(recipients) or "-"),
                        one_line(message.subject))


class WebhookNotifier:
    """POSTs the message as JSON (or ``{"text": …}`` for a Slack incoming webhook)."""

    def __init__(self, url: str, *, slack: bool = False, timeout: float = 10.0,
                 headers: Mapping[str, str] | None = None, name: str | None = None):
        self.url = url
        self.slack = slack
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.name = name or ("slack" if slack else "webhook")

    def __repr__(self) -> str:
        return f"WebhookNotifier({redact_url(self.url)!r}, slack={self.slack})"

    async def send(self, message: Message, recipients: Sequence[str]) -> None:
        import aiohttp

        if self.slack:
            body: dict[str, Any] = {"text": f"*{slack_escape(message.subject)}*\n{slack_escape(message.text)}"}
        else:
            body = dict(message.payload(), recipients=list(recipients))
        where = redact_url(self.url)
        try:
            async with aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as http:
                async with http.post(self.url, data=json.dumps(body, default=str),
                                     headers={"Content-Type": "application/json",
                                              **self.headers}) as resp:
                    if resp.status >= 300:
                        raise NotifyError(f"webhook {where} answered HTTP {resp.status}")
        except NotifyError:
            raise
        except asyncio.TimeoutError:
            raise NotifyError(f"webhook {where} timed out after {self.timeout:g} s") from None
        except aiohttp.ClientError as e:
            # aiohttp's texts can hold the full URL: name the type only
            raise NotifyError(f"webhook {where} failed: {type(e).__name__}") from None


AddressMap = str | Callable[[str], "str | None"]


def single_address(text: str) -> str | None:
    """`text` if it is exactly one plain address, ``local@domain``, else None.

    Parsed by :class:`email.headerregistry.Address`, and refused unless that parse gives back
    exactly `text`: no second address (``mallory,victim@…``), display name, angle brackets,
    comment, whitespace or control character. Quoted local parts (``"a b"@x``, and
    ``"victim"@x``, which is victim's mailbox) and domain literals (``a@[10.0.0.1]``) are
    refused too: a name that needs quoting gets no e-mail rather than a surprising one."""
    if '"' in text or "[" in text:
        return None
    try:
        address = Address(addr_spec=text)
    except (ValueError, IndexError, email.errors.MessageError):  # the parser's ways of saying no
        return None
    return text if address.addr_spec == text and address.username and address.domain else None


class EmailNotifier:
    """Sends one plain-text e-mail per recipient over SMTP (aiosmtplib).

    The session's user gets an e-mail only through `address_template`: a template
    (``"{user}@example.edu"``) or a function of the user name returning an address or None
    (no e-mail); without one, users get no e-mail. The admin recipients (configured) may be
    addresses, or user names mapped the same way. Every address must be exactly one plain
    address (:func:`single_address`): a user whose name maps to anything else gets no e-mail,
    and the failure is reported (logged and counted by the :class:`Dispatcher`) after every
    other recipient has had theirs. `starttls`: None upgrades when the server offers it,
    True requires it, False never; `ssl`: implicit TLS (port 465)."""

    def __init__(self, host: str = "localhost", port: int | None = None, *,
                 sender: str, address_template: AddressMap | None = None,
                 username: str | None = None, password: str | None = None,
                 starttls: bool | None = None, ssl: bool = False,
                 validate_certs: bool = True, timeout: float = 30.0,
                 name: str = "email"):
        self.host = host
        self.port = port
        self.sender = sender
        self.address_template = address_template
        self.username = username
        self._password = password
        self.starttls = starttls
        self.ssl = ssl
        self.validate_certs = validate_certs
        self.timeout = timeout
        self.name = name
        if isinstance(address_template, str):
            address_template.format(user="x")  # a bad template is a setting's error, at start

    def __repr__(self) -> str:
        return f"EmailNotifier({self.host!r}, {self.port!r}, sender={self.sender!r})"

    def address(self, recipient: str, *, user: bool = False) -> str | None:
        """The address for `recipient`, None for no e-mail; ValueError when the mapping
        gives something that is not exactly one plain address. `user`: the recipient is the
        session's user (a name the user chose), never taken as an address."""
        found: object  # what the admin's function returns is checked below
        if "@" in recipient and not user:
            found = recipient
        elif self.address_template is None:
            return None
        elif callable(self.address_template):
            found = self.address_template(recipient)
            if found is None:
                return None
        else:
            found = self.address_template.format(user=recipient)
        if not isinstance(found, str) or single_address(found) is None:
            raise ValueError("not exactly one plain e-mail address")
        return found

    def compose(self, message: Message, to: str) -> EmailMessage:
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = to
        mail["Subject"] = one_line(message.subject)
        mail["Date"] = email.utils.format_datetime(message.now)
        mail["Message-ID"] = email.utils.make_msgid(domain=self.sender.rpartition("@")[2] or None)
        mail.set_content(message.text)
        return mail

    async def send(self, message: Message, recipients: Sequence[str]) -> None:
        import aiosmtplib

        failed: list[str] = []
        addresses: dict[str, str] = {}
        for recipient in recipients:
            try:
                to = self.address(recipient, user=recipient == message.user)
            except Exception as e:  # a user's name, or the admin's function: reported below
                why = str(e) if isinstance(e, ValueError) else f"the address function raised {type(e).__name__}"
                failed.append(f"no e-mail to {one_line(recipient)!r}: {why}")
                continue
            if to is not None:
                addresses.setdefault(to, recipient)
        for to in addresses:  # each on its own: one recipient's failure stops no other
            try:
                await aiosmtplib.send(
                    self.compose(message, to), sender=self.sender, recipients=[to],
                    hostname=self.host, port=self.port,
                    username=self.username, password=self._password,
                    use_tls=self.ssl, start_tls=self.starttls,
                    validate_certs=self.validate_certs, timeout=self.timeout)
            except Exception as e:
                text = str(e) if isinstance(e, (aiosmtplib.SMTPException, OSError)) else ""
                if self._password:
                    text = text.replace(self._password, "***")
                failed.append(f"{to}: {type(e).__name__}" + (f": {one_line(text)}" if text else ""))
        if failed:
            raise NotifyError(f"e-mail via {self.host}:{self.port} failed for " + "; ".join(failed))


@dataclass
class Dispatcher:
    """Routes a message to the user and a copy to admins through every notifier.

    Not in dry run: the user and, with `copy_admins`, the admins. In dry run: the admins
    only, plus the user when `users_in_dry_run`. A failing notifier is logged (and its
    failure returned, which the cycle counts in a metric); the others still run and
    :meth:`send` never raises."""

    notifiers: Sequence[Notifier]
    admin_recipients: Sequence[str] = ()
    copy_admins: bool = True
    users_in_dry_run: bool = False
    dry_run: bool = False

    def recipients(self, message: Message) -> list[str]:
        admins = list(self.admin_recipients)
        if message.dry_run or self.dry_run:
            out = admins + ([message.user] if self.users_in_dry_run else [])
        else:
            out = [message.user] + (admins if self.copy_admins else [])
        return list(dict.fromkeys(out))

    async def _one(self, notifier: Notifier, message: Message, recipients: Sequence[str]) -> bool:
        name = getattr(notifier, "name", type(notifier).__name__)
        try:
            await notifier.send(message, recipients)
        except Exception as e:  # a channel never stops the others
            text = str(e) if isinstance(e, NotifyError) else type(e).__name__
            log.warning("notifier %s failed to send the %s for %s: %s",
                        name, message.event, one_line(message.session), one_line(text))
            return False
        return True

    async def send(self, message: Message) -> dict[str, bool]:
        """Sends `message`; returns ``{notifier name: delivered}``."""
        recipients = self.recipients(message)
        chosen = [n for n in self.notifiers if recipients or getattr(n, "always", False)]
        results = await asyncio.gather(*(self._one(n, message, recipients) for n in chosen))
        return {getattr(n, "name", type(n).__name__): ok for n, ok in zip(chosen, results, strict=True)}

    async def notify(self, decision: Decision, session: Session, *, keepalive_url: str,
                     hub_name: str = "JupyterHub",
                     now: dt.datetime | None = None) -> dict[str, bool]:
        """Builds the message for `decision` and sends it."""
        return await self.send(Message.build(decision, session, keepalive_url=keepalive_url,
                                             hub_name=hub_name, now=now, dry_run=self.dry_run))


def make_notifiers(specs: Iterable[Mapping[str, Any]]) -> list[Notifier]:
    """Notifiers from config dicts: ``{"type": "log"|"webhook"|"slack"|"email", ...kwargs}``."""
    out: list[Notifier] = []
    for spec in specs:
        kwargs = dict(spec)
        kind = kwargs.pop("type")
        if kind == "log":
            out.append(LogNotifier(**kwargs))
        elif kind == "webhook":
            out.append(WebhookNotifier(**kwargs))
        elif kind == "slack":
            out.append(WebhookNotifier(slack=True, **kwargs))
        elif kind == "email":
            out.append(EmailNotifier(**kwargs))
        else:
            raise ValueError(f"unknown notifier type {kind!r}")
    return out
