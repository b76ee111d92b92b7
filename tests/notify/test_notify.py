"""Notifications: message content, real SMTP (aiosmtpd) and webhook (aiohttp) receivers,
dry-run routing, failure isolation, no secrets in logs."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import logging

import pytest
from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from gpu_reclaim_sim.launch import free_port
from jupyterhub_gpu_reclaim.service.notify import (
    Dispatcher,
    EmailNotifier,
    LogNotifier,
    Message,
    WebhookNotifier,
    redact_url,
    single_address,
)
from jupyterhub_gpu_reclaim.policy.evidence import Measured
from jupyterhub_gpu_reclaim.policy.observations import Decision, Session

from ..support.clock import at

pytestmark = pytest.mark.timeout(15)

UTC = dt.timezone.utc
NOW = at(hours=6)  # 14:00 UTC
KEEP_URL = "https://hub.example.org/services/gpu-reclaim/keepalive"
IDLE_SINCE = at(hours=4, minutes=55)  # 12:55 UTC
PASSWORD = "s3cr3t-Pa55word"
TOKEN = "T0KEN-abc123"


def our_logs(caplog) -> str:
    """Log text, less the test receivers' own logs (aiosmtpd, aiohttp's access log)."""
    return "\n".join(r.getMessage() for r in caplog.records
                     if not r.name.startswith(("mail.log", "aiohttp.access", "aiohttp.server")))


def session(user="alice", server="") -> Session:
    return Session(id=f"{user}/{server}", user=user, server=server, gpus=1,
                   started=NOW - dt.timedelta(hours=3))


def warn_decision(sess: Session) -> Decision:
    return Decision(sess.id, "warn", "gpu-idle", "the GPU has been idle for 60 minutes",
                    reclaim_at=NOW + dt.timedelta(minutes=30),
                    measured=Measured(gpus=1, window_max_util=(2.0,), window=dt.timedelta(minutes=60),
                                      latest_util=(0.0,), never_used=False, last_used=IDLE_SINCE,
                                      idle_gpus=(0,)),
                    idle_since=IDLE_SINCE)


def warning(user="alice", server="", dry_run=False) -> Message:
    s = session(user, server)
    return Message.build(warn_decision(s), s, keepalive_url=KEEP_URL, hub_name="TestHub",
                         now=NOW, dry_run=dry_run)


# --- message content ---------------------------------------------------------------------

def test_warning_message_has_every_required_part():
    m = warning("alice", "big")
    assert m.event == "warning"
    assert "alice" in m.subject and "big" in m.subject and "at 14:30 UTC" in m.subject
    t = m.text
    assert "alice" in t and "alice/big" in t                          # the session
    # why, in words of what was measured; the rule's name is the admin's (the JSON's "rule")
    assert ("Why: the GPU has not been used since 12:55 UTC (1 h 5 min ago); its highest use in "
            "the last 1 h was 2 %.") in t and "gpu-idle" not in t and "gpu-idle" not in m.subject
    assert m.payload()["rule"] == "gpu-idle" and m.payload()["why"] in t
    assert "idle since: 12:55 UTC (1 h 5 min ago)" in t               # what was measured
    assert "utilization over the last 1 h: 2 %" in t and "latest GPU utilization: 0 %" in t
    assert "stopped at 14:30 UTC (in 30 min)" in t                    # reclaim time
    assert KEEP_URL in t                                              # how to keep it
    assert "home directory" in t                                      # what is kept
    for lost in ("running processes", "kernel state and variables", "GPU memory",
                 "/tmp", "packages installed outside"):
        assert lost in t
    assert "dry run" not in t.lower()


def test_a_shared_gpus_warning_says_its_utilization_did_not_count():
    s = session()
    d = Decision(s.id, "warn", "shared-gpu-idle-kernels", "no kernel or terminal of this server has worked",
                 reclaim_at=NOW + dt.timedelta(minutes=30),
                 measured=Measured(gpus=1, window_max_util=(None,), latest_util=(), never_used=True,
                                   gpu_shared=True, shared_gpu_util=(90.0,)),
                 idle_since=IDLE_SINCE)
    t = Message.build(d, s, keepalive_url=KEEP_URL, hub_name="TestHub", now=NOW).text
    assert "shared with other servers" in t and "not this server's alone" in t
    assert "GPU utilization" not in t and "has not been used" not in t


def test_times_are_utc_even_from_other_zones():
    s = session()
    tz = dt.timezone(dt.timedelta(hours=2))
    d = Decision(s.id, "warn", "gpu-never-used", "never used",
                 reclaim_at=dt.datetime(2026, 11, 2, 16, 30, tzinfo=tz), measured=Measured(never_used=True))
    m = Message.build(d, s, keepalive_url=KEEP_URL, now=dt.datetime(2026, 11, 2, 16, 0, tzinfo=tz))
    assert m.reclaim_at == dt.datetime(2026, 11, 2, 14, 30, tzinfo=UTC)
    assert "stopped at 14:30 UTC (in 30 min)" in m.text
    assert m.payload()["reclaim_at"] == "2026-11-02T14:30:00Z"
    assert "Why: nothing has run on the GPU since the server started." in m.text
    assert "default server" in m.subject


def test_reclaim_message_and_invalid_actions():
    s = session()
    d = Decision(s.id, "reclaim", "gpu-idle", "idle", reclaim_at=None)
    m = Message.build(d, s, keepalive_url=KEEP_URL, now=NOW)
    assert m.event == "reclaim" and "was stopped" in m.subject and "stopped at 14:00 UTC" in m.text
    assert "GPU memory" in m.text and "home directory" in m.text
    with pytest.raises(ValueError):
        Message.build(Decision(s.id, "keep", "gpu-active", "busy"), s, keepalive_url=KEEP_URL)


def test_without_the_services_pages_no_keepalive_link():
    """A service registered without a url has no keep-alive page: the notices say how to
    keep the session without pointing anywhere."""
    s = session()
    warn = Message.build(warn_decision(s), s, keepalive_url="", now=NOW)
    assert "How to keep your session:\n  Use the GPU / run a cell before the reclaim time." in warn.text
    assert "Open " not in warn.text and "keep alive until" not in warn.text
    gone = Message.build(Decision(s.id, "reclaim", "gpu-idle", "idle"), s, keepalive_url="", now=NOW)
    assert "start it again" in gone.text and "Next time" not in gone.text


def test_dry_run_message_says_so():
    m = warning(dry_run=True)
    assert m.subject.startswith("[dry run]") and "nothing is stopped" in m.text


def test_redact_url():
    assert redact_url(f"https://hooks.slack.com/services/T0/B0/{TOKEN}?x=1") == \
        "https://hooks.slack.com/…"


# --- real receivers ----------------------------------------------------------------------

class Collect:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, sess, envelope):
        self.messages.append((envelope.rcpt_tos,
                              email.message_from_bytes(envelope.content, policy=email.policy.default)))
        return "250 OK"


@pytest.fixture
def smtp():
    handler = Collect()
    logins = []

    def authenticator(server, sess, envelope, mechanism, auth_data):
        logins.append(auth_data.login)
        ok = auth_data.login == b"mailer" and auth_data.password == PASSWORD.encode()
        return AuthResult(success=ok, handled=False)

    port = free_port()
    ctl = Controller(handler, hostname="127.0.0.1", port=port, authenticator=authenticator,
                     auth_require_tls=False)
    ctl.start()
    handler.port = port
    handler.logins = logins
    yield handler
    ctl.stop()


@pytest.fixture
async def hook():
    got = []

    async def receive(request):
        got.append((request.path, await request.json()))
        return web.Response(text="ok")

    async def fail(request):
        return web.Response(status=500, text="boom")

    app = web.Application()
    app.router.add_post("/hook", receive)
    app.router.add_post("/fail", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", got
    await runner.cleanup()


def mailer(smtp, **kw) -> EmailNotifier:
    return EmailNotifier("127.0.0.1", smtp.port, sender="reclaim@hub.example.org",
                         username="mailer", password=PASSWORD, starttls=False, timeout=5, **kw)


async def test_email_reaches_a_real_smtp_server(smtp, caplog):
    caplog.set_level(logging.DEBUG)
    d = Dispatcher([mailer(smtp, address_template="{user}@uni.example")], ["ops@hub.example.org"])
    assert await d.send(warning("alice", "big")) == {"email": True}
    assert smtp.logins == [b"mailer", b"mailer"]
    by_to = {m["To"]: (rcpt, m) for rcpt, m in smtp.messages}
    assert set(by_to) == {"alice@uni.example", "ops@hub.example.org"}
    rcpt, m = by_to["alice@uni.example"]
    assert rcpt == ["alice@uni.example"]
    assert m["From"] == "reclaim@hub.example.org"
    assert "14:30 UTC" in m["Subject"] and "alice" in m["Subject"]
    body = m.get_content()
    assert KEEP_URL in body and "Why: the GPU has not been used since" in body and "GPU memory" in body
    assert PASSWORD not in our_logs(caplog)


async def test_email_address_function_and_bad_password(smtp, caplog):
    caplog.set_level(logging.DEBUG)
    n = mailer(smtp, address_template=lambda u: None if u == "nomail" else f"{u}@x.example")
    n._password = "wrong-" + PASSWORD
    d = Dispatcher([n], [], copy_admins=False)
    assert await d.send(warning("bob")) == {"email": False}
    assert not smtp.messages
    assert PASSWORD not in our_logs(caplog) and "failed" in our_logs(caplog)
    n._password = PASSWORD
    assert await Dispatcher([n], []).send(warning("nomail")) == {"email": True}
    assert not smtp.messages  # no address: nothing sent, no error


async def test_webhook_json_and_slack_form(hook):
    base, got = hook
    d = Dispatcher([WebhookNotifier(f"{base}/hook?token={TOKEN}"),
                    WebhookNotifier(f"{base}/hook", slack=True, headers={"X-Test": "1"})],
                   ["ops"])
    assert await d.send(warning("alice", "big")) == {"webhook": True, "slack": True}
    bodies = [b for _, b in got]
    full = next(b for b in bodies if "event" in b)
    slack = next(b for b in bodies if "event" not in b)
    assert full["event"] == "warning" and full["session"] == "alice/big"
    assert full["user"] == "alice" and full["rule"] == "gpu-idle"
    assert full["reclaim_at"] == "2026-11-02T14:30:00Z"
    assert full["evidence"]["idle_since"] == "2026-11-02T12:55:00+00:00"  # evidence_time
    assert KEEP_URL in full["text"] and full["recipients"] == ["alice", "ops"]
    assert set(slack) == {"text"} and KEEP_URL in slack["text"] and "alice/big" in slack["text"]


async def test_failing_webhooks_are_counted_and_email_still_goes(hook, smtp, caplog):
    caplog.set_level(logging.DEBUG)
    base, got = hook
    dead = f"http://127.0.0.1:{free_port()}/hook?token={TOKEN}"
    d = Dispatcher([WebhookNotifier(f"{base}/fail?token={TOKEN}", name="hook500"),
                    WebhookNotifier(dead, timeout=2, name="refused"),
                    mailer(smtp, address_template="{user}@uni.example"), LogNotifier()], ["ops@hub.example.org"])
    result = await d.send(warning())
    assert result == {"hook500": False, "refused": False, "email": True, "log": True}
    assert len(smtp.messages) == 2
    assert "HTTP 500" in our_logs(caplog)
    assert TOKEN not in our_logs(caplog) and PASSWORD not in our_logs(caplog)


async def test_a_raising_notifier_never_stops_the_others():
    class Broken:
        name = "broken"

        async def send(self, message, recipients):
            raise RuntimeError(f"password={PASSWORD}")

    class Keep:
        name = "keep"

        def __init__(self):
            self.calls = []

        async def send(self, message, recipients):
            self.calls.append(list(recipients))

    keep = Keep()
    d = Dispatcher([Broken(), keep], ["root"])
    assert await d.send(warning()) == {"broken": False, "keep": True}
    assert keep.calls == [["alice", "root"]]


# --- routing -----------------------------------------------------------------------------

class Record:
    name = "rec"

    def __init__(self):
        self.calls = []

    async def send(self, message, recipients):
        self.calls.append(list(recipients))


async def test_routing_normal_and_dry_run(caplog):
    caplog.set_level(logging.INFO)
    r = Record()
    await Dispatcher([r], ["root", "ops"]).send(warning())
    await Dispatcher([r], ["root"], copy_admins=False).send(warning())
    await Dispatcher([r], ["root"]).send(warning(dry_run=True))
    await Dispatcher([r], ["root"], users_in_dry_run=True).send(warning(dry_run=True))
    assert r.calls == [["alice", "root", "ops"], ["alice"], ["root"], ["root", "alice"]]
    # dry run, no admins: nobody to tell, but the log still records it
    r2, logn = Record(), LogNotifier()
    assert await Dispatcher([r2, logn], []).send(warning(dry_run=True)) == {"log": True}
    assert r2.calls == [] and "warning for alice/" in caplog.text


async def test_dispatcher_dry_run_flag_builds_dry_run_messages():
    r = Record()
    d = Dispatcher([r], ["root"], dry_run=True)
    s = session("carol")
    await d.notify(warn_decision(s), s, keepalive_url=KEEP_URL, now=NOW)
    assert r.calls == [["root"]]


# --- hostile names -------------------------------------------------------------------------
# A JupyterHub user name may hold anything but "/" and outer spaces (Authenticator.
# validate_username without username_pattern): each channel must show it, never obey it.

FORGED = "x\r\nINFO forged"


def ours(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("jupyterhub_gpu_reclaim")]


class Refusing(Collect):
    """Refuses mail to one mailbox (550), as a server does for an unknown user."""

    async def handle_RCPT(self, server, sess, envelope, address, rcpt_options):
        if address.startswith("refused@"):
            return "550 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@pytest.mark.parametrize("user", ["<!channel>", "<mailto:a@b.example|click here>", "<@U012AB3CD> & <!here>",
                                  "<https://evil.example|Keep your session>"])
async def test_slack_shows_names_it_would_otherwise_obey(hook, user):
    """Slack mrkdwn: & < > escaped exactly as Slack documents, so no mention and no link
    can be formed; the generic webhook carries the name as JSON data, unchanged."""
    base, got = hook
    d = Dispatcher([WebhookNotifier(f"{base}/hook", slack=True), WebhookNotifier(f"{base}/hook")], [])
    assert await d.send(warning(user, "gpu")) == {"slack": True, "webhook": True}
    slack = next(b for _, b in got if "event" not in b)["text"]
    full = next(b for _, b in got if "event" in b)
    assert "<" not in slack and ">" not in slack and "&lt;" in slack  # nothing Slack parses
    escaped = user.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert f"{escaped}'s server 'gpu'" in slack
    assert full["user"] == user and full["session"] == f"{user}/gpu" and user in full["text"]


async def test_a_name_with_a_comma_never_mails_a_stranger(smtp, caplog):
    """mallory,victim@uni.example is two addresses, and victim@other.example a stranger's:
    the user gets no e-mail; the admins get theirs; the refusal is logged and returned (the cycle counts it)."""
    caplog.set_level(logging.INFO)
    n = mailer(smtp, address_template="{user}@uni.example")
    for user in ("mallory,victim", "victim@other.example", '"a b"', '"victim"', "a <victim@other.example>",
                 "mallory victim", "ünïcödé"):
        smtp.messages.clear()
        d = Dispatcher([n], ["ops@hub.example.org"])
        assert await d.send(warning(user)) == {"email": False}, user  # counted by the cycle's metric
        assert [(rcpt, m["To"]) for rcpt, m in smtp.messages] == [(["ops@hub.example.org"], "ops@hub.example.org")]
        logged = ours(caplog)[-1].getMessage()
        assert f"no e-mail to {user!r}: not exactly one plain e-mail address" in logged, logged


async def test_a_name_with_crlf_forges_nothing_and_everyone_else_is_told(smtp, caplog):
    """CR/LF in a name: no forged log line, no broken or injected header, no forged line in
    the body; the user's own e-mail is refused, and the admins get theirs."""
    caplog.set_level(logging.INFO)
    d = Dispatcher([LogNotifier(), mailer(smtp, address_template="{user}@uni.example")],
                   ["ops@hub.example.org", "admin"])
    assert await d.send(warning(FORGED, f"srv{FORGED}")) == {"log": True, "email": False}
    for record in ours(caplog):
        assert "\n" not in record.getMessage() and "\r" not in record.getMessage(), record.getMessage()
    assert any("x\\r\\nINFO forged" in r.getMessage() for r in ours(caplog))
    assert sorted(m["To"] for _, m in smtp.messages) == ["admin@uni.example", "ops@hub.example.org"]
    for _, m in smtp.messages:
        assert "x\\r\\nINFO forged" in m["Subject"]
        assert not any(line.startswith("INFO forged") for line in m.get_content().splitlines())
        assert set(m.keys()) == {"From", "To", "Subject", "Date", "Message-ID", "Content-Type",
                                 "Content-Transfer-Encoding", "MIME-Version"}


async def test_one_refused_mailbox_stops_no_other(caplog):
    """The SMTP server refuses the user's mailbox: the admins still get their copies."""
    handler = Refusing()
    port = free_port()
    ctl = Controller(handler, hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        n = EmailNotifier("127.0.0.1", port, sender="reclaim@hub.example.org", starttls=False, timeout=5,
                          address_template="{user}@uni.example")
        d = Dispatcher([n], ["ops@hub.example.org", "root"])
        assert await d.send(warning("refused")) == {"email": False}
    finally:
        ctl.stop()
    assert sorted(m["To"] for _, m in handler.messages) == ["ops@hub.example.org", "root@uni.example"]
    assert "refused@uni.example: SMTPRecipientsRefused" in ours(caplog)[-1].getMessage()


async def test_unicode_names_are_shown_as_written(smtp, hook):
    base, got = hook
    d = Dispatcher([WebhookNotifier(f"{base}/hook", slack=True),
                    mailer(smtp, address_template=lambda user: "jose@uni.example")], [])
    assert await d.send(warning("José", "análisis")) == {"slack": True, "email": True}
    (rcpt, m), = smtp.messages
    assert rcpt == ["jose@uni.example"] and "José's server 'análisis'" in m.get_content()
    assert "José" in m["Subject"] and "José's server 'análisis'" in got[0][1]["text"]


def test_single_address():
    assert single_address("alice@uni.example") == "alice@uni.example"
    assert single_address("a.b+c@mail.uni.example") == "a.b+c@mail.uni.example"
    for bad in ("mallory,victim@uni.example", "a@x,b@y", "Alice <a@x.example>", "<a@x.example>",
                '"a b"@x.example', '"victim"@x.example', "a(c)@x.example", "a@x.example (c)",
                "a@[10.0.0.1]", "a@", "@x", "a@b@c", "a b@x", FORGED + "@x.example", "a@x\u2028",
                "ünï@x.example", "a.@x", ""):
        assert single_address(bad) is None, bad


def test_an_address_template_with_an_unknown_field_fails_at_start():
    with pytest.raises(KeyError):
        EmailNotifier(sender="reclaim@hub.example.org", address_template="{username}@uni.example")
