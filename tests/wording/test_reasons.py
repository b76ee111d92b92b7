"""Why, in plain words of what was measured (service/reasons.py), and the one way a time is
written (wording.clock, relative, moment): the notices, the pages and the API say each fact
the same, and no rule's name reaches a user."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import quote

import pytest
from hypothesis import given

from jupyterhub_gpu_reclaim.policy.evidence import Measured, Recorded
from jupyterhub_gpu_reclaim.policy.observations import Decision, Session
from jupyterhub_gpu_reclaim.service.notify import Message
from jupyterhub_gpu_reclaim.service.reasons import sentence, why
from jupyterhub_gpu_reclaim.service.status import SessionStatus
from jupyterhub_gpu_reclaim.store.reclaims import ReclaimRecord
from jupyterhub_gpu_reclaim.timestamps import evidence_time
from jupyterhub_gpu_reclaim.web import render
from jupyterhub_gpu_reclaim.wording import clock, moment, relative

from ..support.clock import at
from ..support.policy_inputs import PROP, configs, nows, run, views

NOW = at(hours=6)  # 14:00 UTC
SINCE = at(hours=5, minutes=22)  # 13:22 UTC
# a rule's name as the policy writes them: words joined by hyphens ("gpu-never-used")
SLUG = re.compile(r"\b[a-z]+(?:-[a-z]+)+\b")


def test_a_time_is_written_one_way():
    assert clock(SINCE, NOW) == "13:22 UTC"
    assert clock(SINCE - dt.timedelta(days=1), NOW) == "2026-11-01 13:22 UTC"  # another day: its date
    assert clock(SINCE.astimezone(dt.timezone(dt.timedelta(hours=-5))), NOW) == "13:22 UTC"
    assert relative(SINCE, NOW) == "38 min ago" and relative(NOW + dt.timedelta(seconds=90), NOW) == "in 1 min"
    assert relative(NOW + dt.timedelta(seconds=40), NOW) == "in 40 s" and relative(NOW, NOW) == "now"
    assert relative(NOW - dt.timedelta(days=1), NOW) == ""  # a day or more: the date says it
    # rounded down, never overstated: 2 min 59 s is "2 min" everywhere
    assert relative(NOW - dt.timedelta(minutes=2, seconds=59), NOW) == "2 min ago"
    assert moment(SINCE, NOW) == "13:22 UTC (38 min ago)"
    assert moment(NOW - dt.timedelta(days=2), NOW) == "2026-10-31 14:00 UTC"


def said(rule, stored):
    """Why, from a stored reclaim's evidence (read back by `Recorded.read`)."""
    r = Recorded.read(stored)
    return why(rule, r.measured, r.idle_since, r.by)


@pytest.mark.parametrize("rule, evidence, text", [
    ("gpu-never-used", {"idle_since": evidence_time(SINCE), "never_used": True},
     "nothing has run on the GPU since 13:22 UTC (38 min ago)"),
    ("gpu-never-used", {"idle_since": evidence_time(SINCE), "last_busy_kernel": evidence_time(SINCE)},
     "the GPU has not been used since the server started, and no cell has run since 13:22 UTC (38 min ago)"),
    ("gpu-idle", {"idle_since": evidence_time(SINCE), "window_max_util": [0.4], "window_minutes": 120.0},
     "the GPU has not been used since 13:22 UTC (38 min ago); its highest use in the last 2 h was 0.4 %"),
    ("shared-gpu-idle-kernels", {"idle_since": evidence_time(SINCE)},
     "no kernel or terminal of this server has run since 13:22 UTC (38 min ago) (its GPU is shared, "
     "so only the server's own work counts)"),
    ("cpu-work-on-gpu", {"cpu_work_since": evidence_time(SINCE)},
     "only CPU work has run since 13:22 UTC (38 min ago), and the GPU has not been used since the server "
     "started: a profile without a GPU would do"),
    ("job-ended-unattended", {"idle_since": evidence_time(SINCE), "last_seen": evidence_time(at(hours=2))},
     "the work on the GPU ended at 13:22 UTC (38 min ago), and nobody has been active since 10:00 UTC (4 h ago)"),
    ("intent-ended", {"idle_since": evidence_time(SINCE), "intent_end": evidence_time(at(hours=6, minutes=10))},
     "kept alive only until 14:10 UTC (in 10 min), and the GPU has not been used since 13:22 UTC (38 min ago)"),
    ("max-age", {"max_age_at": evidence_time(at(hours=6, minutes=30))},
     "the session reaches the longest time a server may run at 14:30 UTC (in 30 min)"),
    ("admin", {"by": "root"}, "an admin (root) reclaimed it"),
    ("idle-culler-timeout", {"hub_last_activity": evidence_time(at(hours=4))}, "no activity since 12:00 UTC (2 h ago)"),
    ("idle-culler-timeout", {"inactive_s": 5400.0}, "no activity for 1 h 30 min"),
    ("idle-culler-max-age", {}, "the server has run for the longest time a server may run"),
])
def test_why_says_what_was_measured(rule, evidence, text):
    assert said(rule, evidence).text(NOW) == text


@pytest.mark.parametrize("evidence", [
    None, {}, "not a mapping", {"idle_since": "yesterday", "window_max_util": "x", "window_minutes": float("nan")},
    {"idle_since": 12, "last_seen": ["x"], "intent_end": "9999-12-31T23:59:59-23:59", "inactive_s": float("inf"),
     "by": {"x": 1}, "window_minutes": True, "cpu_work_since": None},
])
@pytest.mark.parametrize("rule", ["gpu-never-used", "gpu-idle", "shared-gpu-idle-kernels", "cpu-work-on-gpu",
                                  "job-ended-unattended", "intent-ended", "max-age", "admin",
                                  "idle-culler-timeout", "idle-culler-max-age", "a-rule-from-a-newer-version", None])
def test_stored_evidence_is_never_trusted_and_no_rule_name_shows(rule, evidence):
    """Evidence read back from the store may be anything: words still come, without the
    times that do not read, and never with the rule's name."""
    text = said(rule, evidence).text(NOW)
    assert text and not SLUG.search(text), text
    assert "yesterday" not in text and "9999" not in text


def test_a_reclaim_record_reads_back_what_it_wrote():
    record = Recorded(Measured(window=dt.timedelta(hours=2), window_max_util=(0.4, None), last_seen=at(hours=2),
                               inactive=dt.timedelta(minutes=90)), idle_since=SINCE, by="root")
    assert Recorded.read(record.shown()) == record
    assert Recorded.read({"by": ""}) == Recorded(Measured())  # no admin's name: none


@PROP
@given(views(), configs, nows)
def test_every_decision_of_the_policy_is_said_in_plain_words(view, config, now):
    """Whatever the policy decides, its why names no rule, and each time it says is one the
    policy measured (in the decision's evidence); a reclaim's record, its evidence read back,
    says the same."""
    d = run(view, now, config=config)
    words = why(d.rule, d.measured, d.idle_since)
    assert not SLUG.search(words.text(now)), (d.rule, words)
    measured = {v for v in d.shown().values() if isinstance(v, str)}
    assert {evidence_time(p) for p in words.parts if isinstance(p, dt.datetime)} <= measured
    assert said(d.rule, d.shown()) == words


def _warned() -> SessionStatus:
    return SessionStatus(session="alice/", user="alice", server="", gpus=1, action="keep", rule="gpu-never-used",
                         reason="warned", measured=Measured(never_used=True),
                         idle_since=SINCE, warned_at=at(hours=5, minutes=52), reclaim_at=at(hours=6, minutes=2))


def _texts(html: str, cls: str) -> list[str]:
    """The text of each element of class `cls` (its tags dropped)."""
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(rf'class="{cls}">(.*?)</span>', html)]


def test_the_banner_the_card_the_notice_and_the_api_say_the_same(monkeypatch):
    """A warned session: the hub pages' banner, the user page's card, the e-mail and the API
    give the same why, with the same times and the same "how long ago"."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)  # the pages' `when` reads the time there
    s = _warned()
    env = dict(prefix="/services/gpu-reclaim/", hub_prefix="/hub/", user={"name": "alice"}, is_admin=False,
               dry_run=False, xsrf="tok", now=NOW, sparkline=render.sparkline, state_of=render.state_of,
               quote=quote, max_keepalive=dt.timedelta(hours=12))
    banner = render._jinja.get_template("embed_banner.html").render(
        **env, warned=[{**s.to_dict(), "why": render.why_of(s, "warned")}])
    page = render._jinja.get_template("user.html").render(
        **env, sessions=[s], queue=[], reclaims=[], selected="", error="", notice="", presets=[1],
        cap_text="12 h", cycle_t=NOW)
    said = "nothing has run on the GPU since 13:22 UTC (38 min ago)"
    assert _texts(banner, "reason") == _texts(page, "reason") == [said]
    assert '<time datetime="2026-11-02T13:22:00Z" title="2026-11-02 13:22:00 UTC">13:22 UTC</time>' in banner
    assert "gpu-never-used" not in banner + page
    session = Session("alice/", "alice", "", 1, at())
    d = Decision("alice/", "warn", "gpu-never-used", "GPU not used since ...", reclaim_at=s.reclaim_at,
                 measured=s.measured, idle_since=s.idle_since)
    assert f"Why: {said}." in Message.build(d, session, keepalive_url="", now=NOW).text
    assert render.session_json(s, NOW)["why"] == said
    # and in parts, for the JupyterLab warning to write its time in the reader's zone
    assert "".join(p["text"] for p in render.session_json(s, NOW)["why_parts"]) == said.removesuffix(" (38 min ago)")
    assert render.session_json(s, NOW)["state_text"] == "warned: reclaim at 14:02 UTC (in 2 min)"


def test_a_warned_session_whose_data_went_missing_says_the_hold(monkeypatch):
    """Warned, then the GPU data stopped: the warning stands, the latest decision is a hold,
    and that is what the card says; the banner says when, with no why it cannot know."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    s = _warned()
    s.action, s.rule, s.reason, s.measured = "hold", "gpu-data-missing", "GPU data missing (no GPU samples)", Measured()
    assert render.state_of(s, NOW)[0] == "warned" and render.why_of(s, "warned") is None
    env = dict(prefix="/p/", hub_prefix="/hub/", user={"name": "alice"}, is_admin=False, dry_run=False, xsrf="t",
               now=NOW, sparkline=render.sparkline, state_of=render.state_of, quote=quote)
    page = render._jinja.get_template("user.html").render(
        **env, sessions=[s], queue=[], reclaims=[], selected="", error="", notice="", presets=[1],
        cap_text="12 h", cycle_t=NOW)
    assert _texts(page, "reason") == ["GPU data missing (no GPU samples)"]
    banner = render._jinja.get_template("embed_banner.html").render(**env, warned=[{**s.to_dict(), "why": None}])
    assert 'class="reason"' not in banner and "(in 2 min). <a" in banner
    assert "gpu-data-missing" not in page + banner


def test_the_history_says_why_not_the_rule(monkeypatch):
    """The user page's reclaims of the last 7 days: why each was reclaimed, as it was said
    when it was warned, never the rule's name."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    record = ReclaimRecord(1, "alice/", "ep", "gpu-never-used", at(hours=5, minutes=50), 1,
                           {"idle_since": evidence_time(SINCE), "never_used": True}, at(hours=5, minutes=51), "stopped", "")
    by_admin = ReclaimRecord(2, "alice/x", "ep2", "admin", NOW, 1, {"by": "root"}, None, None, "")
    page = render._jinja.get_template("user.html").render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "alice"}, is_admin=False, dry_run=False, xsrf="t", now=NOW,
        sparkline=render.sparkline, state_of=render.state_of, quote=quote, sessions=[], queue=[], selected="",
        error="", notice="", presets=[1], cap_text="12 h", cycle_t=NOW,
        reclaims=[(render.reclaim_json(r, NOW), render.reclaimed_why(r), None) for r in (by_admin, record)])
    cells = [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<td class="why">(.*?)</td>', page)]
    assert cells == ["an admin (root) reclaimed it", "nothing has run on the GPU since 13:22 UTC (38 min ago)"]
    assert "gpu-never-used" not in page and ">admin<" not in page
    assert render.reclaim_json(record, NOW)["why"] == cells[1]


def test_a_sentence_on_a_page_escapes_its_words():
    html = str(render.say(sentence("<b>x</b> since ", SINCE)))
    assert html.startswith("&lt;b&gt;x&lt;/b&gt; since <time ") and "<b>" not in html


def test_a_reclaims_why_in_parts_holds_its_times_as_the_page_does(monkeypatch):
    """The API's `why_parts` (the JupyterLab dialog writes their times in its reader's zone):
    the words, and each time as the page's <time> holds it, its instant with its offset."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    record = ReclaimRecord(1, "alice/", "ep", "gpu-never-used", at(hours=5, minutes=50), 1,
                           {"idle_since": evidence_time(SINCE), "never_used": True}, at(hours=5, minutes=51), "stopped", "")
    parts = render.reclaim_json(record, NOW)["why_parts"]
    assert parts == [{"text": "nothing has run on the GPU"}, {"text": " since "},
                     {"time": "2026-11-02T13:22:00Z", "text": "13:22 UTC", "title": "2026-11-02 13:22:00 UTC",
                      "relative": "38 min ago"}]
    time = parts[2]
    assert dt.datetime.fromisoformat(time["time"]) == SINCE
    page = str(render.say(render.reclaimed_why(record)))
    assert f'<time datetime="{time["time"]}" title="{time["title"]}">{time["text"]}</time>' in page
