"""The web pages' pieces without a hub: state texts, the sparkline, time and duration
parsing of the forms and API, CSV cells, and the templates' escaping and dry-run banner."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Decision
from jupyterhub_gpu_reclaim.service.status import CycleStatus, SessionStatus
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.web.admin_view import admin_data
from jupyterhub_gpu_reclaim.timestamps import utcnow
from jupyterhub_gpu_reclaim.web import app, inputs, render
from jupyterhub_gpu_reclaim.web.inputs import BadInput, local_time_to_utc, parse_until
from jupyterhub_gpu_reclaim.report.formats import csv_cell
from jupyterhub_gpu_reclaim.web.render import sparkline, state_of

from ..support.clock import at

UTC = dt.timezone.utc
NOW = at(hours=6)  # 14:00 UTC, the time the texts below are read at


def info(**kw):
    return SessionStatus(**{"session": "alice/", "user": "alice", "server": "", "gpus": 1, "action": "keep",
                            "rule": "gpu-active", "reason": "", **kw})


@pytest.mark.parametrize("kw, kind, text", [
    ({}, "active", "active"),
    # the why says since when: the state does not say it again
    ({"rule": "gpu-idle", "idle_since": NOW - dt.timedelta(minutes=105)}, "idle", "idle"),
    ({"warned_at": NOW, "reclaim_at": NOW + dt.timedelta(minutes=5)}, "warned", "warned: reclaim at 14:05 UTC (in 5 min)"),
    ({"warned_at": NOW, "reclaim_at": NOW, "intent_until": NOW + dt.timedelta(hours=2)}, "kept",
     "kept alive until 16:00 UTC (in 2 h)"),
    ({"intent_until": NOW - dt.timedelta(hours=1)}, "active", "active"),
    ({"exempt_until": NOW + dt.timedelta(hours=1)}, "exempt", "exempt until 15:00 UTC (in 1 h)"),
    ({"rule": "exempt"}, "exempt", "exempt"),
    ({"action": "hold", "rule": "gpu-data-missing", "reason": "no GPU data"}, "held", "held: data missing"),
    ({"gpus": 0}, "cpu", "no GPU"),
    ({"stopping": True}, "stopping", "stopping"),
])
def test_state_texts(kw, kind, text):
    state, words = state_of(info(**kw), NOW)
    assert (state, words.text(NOW)) == (kind, text)


def test_sparkline_is_svg_with_gaps_and_only_numbers():
    svg = sparkline([0, 50, None, 100, 20])
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "latest 20 %" in svg
    assert sparkline([None, 30, None, None]).count("<circle") == 1  # a lone sample shows as a dot
    assert "<rect" not in svg and "idle-threshold" not in svg  # a baseline, not a box like an input
    assert sparkline([]) == ""
    assert "no GPU data in the last 2 h" in sparkline([None, None])
    svg = sparkline([0, 50], threshold=5.0, height=24)
    assert 'class="idle-threshold"' in svg and 'y1="21.9"' in svg and "idle below 5 %" in svg


def test_parse_until():
    assert abs(parse_until({"duration": "2h"}, dt.timedelta(hours=4)) - utcnow() - dt.timedelta(hours=2)) \
        < dt.timedelta(seconds=5)
    assert parse_until({"until": "2030-01-01T10:00:00+02:00"}, dt.timedelta(hours=4)) == \
        dt.datetime(2030, 1, 1, 8, tzinfo=UTC)
    for bad in ({}, {"until": "tomorrow"}, {"hours": "x"}, {"until": "2030-01-01T10:00"},
                {"duration": "1h", "until": "2030-01-01T10:00:00Z"}):
        with pytest.raises(BadInput):
            parse_until(bad, dt.timedelta(hours=4))


def test_local_time_to_utc_is_the_next_such_moment(monkeypatch):
    monkeypatch.setattr(inputs, "utcnow", lambda: NOW)  # where local_time_to_utc reads the time
    assert local_time_to_utc("15:30", "0") == dt.datetime(2026, 11, 2, 15, 30, tzinfo=UTC)
    assert local_time_to_utc("13:00", "0") == dt.datetime(2026, 11, 3, 13, 0, tzinfo=UTC)  # tomorrow
    # UTC+1 (getTimezoneOffset() = -60): 16:00 local is 15:00 UTC
    assert local_time_to_utc("16:00", "-60") == dt.datetime(2026, 11, 2, 15, 0, tzinfo=UTC)
    for bad in ("25:00", "12", "ab:cd"):
        with pytest.raises(BadInput, match="HH:MM"):
            local_time_to_utc(bad, "0")
    with pytest.raises(BadInput):
        local_time_to_utc("12:00", "99999")


def test_csv_cells_are_not_formulas():
    assert csv_cell("=cmd()") == "'=cmd()" and csv_cell("@x") == "'@x" and csv_cell("alice") == "alice"
    assert csv_cell(None) == ""


def render_admin(dry_run: bool, sessions=(), queue=(), **kw):
    """The admin page of `sessions` (SessionStatus) and `queue`, as admin_view gives it."""
    status = CycleStatus(t=NOW, sessions={s.session: s for s in sessions}, queue=list(queue), **kw)
    data = admin_data(status, None, ServiceSettings(dry_run=dry_run), NOW)
    return render._jinja.get_template("admin.html").render(
        prefix="/services/gpu-reclaim/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True,
        dry_run=dry_run, xsrf="tok", now=NOW, sparkline=sparkline, state_of=state_of, quote=quote,
        max_keepalive=dt.timedelta(hours=12), data=data, infos=status.sessions, notice="", error="", refresh_s=10)


def test_admin_page_has_a_prominent_dry_run_banner_only_in_dry_run():
    assert "DRY RUN" in render_admin(True) and "DRY RUN" not in render_admin(False)


def test_admin_page_escapes_names():
    evil = '<script>alert("x")</script>\''
    s = info(user=evil, server=evil, session=f"{evil}/{evil}", profile=evil, node="n", util_mean=[1.0],
             util_max=[2.0], util_now=[1.0], mem_mib=[10.0], spark=[1.0], hub_last_activity=NOW)
    page = render_admin(False, [s])
    assert "<script>" not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#39;" in page


def test_admin_page_shows_each_sessions_policy_rule_escaped():
    ruled = info(session="bob/", user="bob", policy_rule='gpu-<b>short</b>',
                 decision=Decision("bob/", "keep", "gpu-active", "", policy_rule="x", under_rules=True))
    page = render_admin(False, [info(), ruled])
    assert page.count('class="policy-rule"') == 1  # alice has the base policy: no badge
    assert "rules: gpu-&lt;b&gt;short&lt;/b&gt;" in page and "<b>short" not in page


def test_reclaim_now_is_quiet_and_not_offered_on_a_row_already_stopping():
    """Issue 39: *Reclaim now* an outlined button, not the loudest element of the row; a
    session already stopping has no action at all."""
    page = render_admin(False, [info(), info(session="bob/", user="bob", stopping=True)])
    alice, bob = (page.split(f'data-session="{who}/"', 1)[1].split("</tr>", 1)[0] for who in ("alice", "bob"))
    assert 'class="btn btn-sm btn-outline-danger">Reclaim now</button>' in alice
    assert "btn-danger" not in page and "<button" not in bob.split('<td class="actions">', 1)[1]


def test_access_log_hides_secret_query_values(caplog):
    from unittest import mock

    from tornado.httputil import HTTPServerRequest

    handler = mock.Mock()
    handler.get_status.return_value = 403
    handler.request = HTTPServerRequest(
        method="GET", uri="/services/gpu-reclaim/oauth_callback?code=SECRET&state=STATE&token=TOK&x=a%0Ab")
    with caplog.at_level("DEBUG", logger="jupyterhub_gpu_reclaim.web"):
        app._log_request(handler)
    assert "oauth_callback?code=[secret]&state=[secret]&token=[secret]&x=a%0Ab" in caplog.text
    assert "SECRET" not in caplog.text and "STATE" not in caplog.text and "TOK" not in caplog.text


def test_an_admin_exemption_turns_warn_and_reclaim_into_keep():
    from jupyterhub_gpu_reclaim.policy.evidence import Measured
    from jupyterhub_gpu_reclaim.policy.observations import Decision, Exemption
    from jupyterhub_gpu_reclaim.policy.step import exempted

    ex = Exemption("alice/", until=NOW + dt.timedelta(hours=2), set_at=NOW, by="admin")
    for action in ("warn", "reclaim", "keep", "hold"):
        d = exempted(Decision("alice/", action, "gpu-idle", "idle", measured=Measured(gpus=1), idle_since=NOW), ex)
        assert (d.action, d.rule) == ("keep", "exempt") and d.exempt.by == "admin"
        assert d.idle_since == NOW and d.measured.gpus == 1 and "16:00" in d.reason
    d = Decision("alice/", "reclaim", "gpu-idle", "idle")
    assert exempted(d, None) is d


def whatif_result(series_hours: int = 3):
    from jupyterhub_gpu_reclaim.replay.whatif import ArmSummary, Bucket, Treatment, SessionDifference, WhatIf

    since = NOW - dt.timedelta(hours=series_hours)
    series = [Bucket(since + dt.timedelta(hours=i), since + dt.timedelta(hours=i + 1), live_idle=1.0 + i,
                     live_freed=0.5 * i, override_idle=0.5, override_freed=2.0 + i) for i in range(series_hours)]
    evil = '<script>alert("x")</script>'
    diff = SessionDifference(session=f"{evil}/", user=evil, server="", started=since, gpus=1, live=Treatment(),
                             override=Treatment(warnings=1, first_warning=since, reclaimed_at=NOW, rule="gpu-idle",
                                              gpu_hours_freed=2.5))
    return WhatIf(since=since, until=NOW, settings={"idle_reclaim_after": 5400}, sessions=2, samples=100,
                  gpu_hours_recorded=12.0, live=ArmSummary(1, 2, 1.5, 6.0, 10.5),
                  override=ArmSummary(2, 3, 9.0, 1.5, 3.0, users_interrupted=1,
                                      returned={"under_30m": 1, "under_2h": 0, "under_8h": 0, "later": 0, "never": 1},
                                      by_rule={"gpu-idle": {"reclaims": 2, "gpu_hours_freed": 9.0, "users_interrupted": 1,
                                                            "returned": {"under_30m": 1, "under_2h": 0, "under_8h": 0,
                                                                         "later": 0, "never": 1}}}),
                  differences_total=1, differences=[diff],
                  bucket=dt.timedelta(hours=1), series=series)


def test_whatif_chart_is_inline_svg_with_title_desc_and_a_bar_per_policy_and_hour():
    from jupyterhub_gpu_reclaim.web.chart import whatif_chart

    svg = whatif_chart(whatif_result())
    assert svg.startswith('<svg class="whatif-chart"') and svg.endswith("</svg>")
    assert 'role="img" aria-labelledby="whatif-chart-title whatif-chart-desc"' in svg
    assert "<title id=\"whatif-chart-title\">Idle and freed GPU-hours" in svg
    assert "the live policy frees 1.5 GPU-hours and leaves 6 idle; the override frees 9 and leaves 1.5 idle" in svg
    # per hour, one bar (freed under idle) per policy, with its numbers as a tooltip
    assert svg.count("<rect") == 3 * 2 * 2 + 4  # and the legend's four
    assert "<title>override, " in svg and ": 4.00 GPU-hours freed, 0.50 GPU-hours idle</title>" in svg
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    # the axis' top is a round number above the largest stack (4.5)
    assert '>5</text>' in svg and '>2.5</text>' in svg


def test_whatif_page_shows_numbers_side_by_side_and_escapes_names():
    result = whatif_result()
    from jupyterhub_gpu_reclaim.replay.interruptions import LABELS
    from jupyterhub_gpu_reclaim.web.chart import whatif_chart

    page = render._jinja.get_template("whatif.html").render(
        prefix="/services/gpu-reclaim/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True,
        dry_run=False, xsrf="tok", now=NOW, form={"since": "3h", "until": "", "override": "idle_reclaim_after: 90m"},
        result=result, error="", chart=whatif_chart(result), settings={"idle_reclaim_after": 7200}, rules=[],
        returned_labels=LABELS)
    assert '<tr data-row="reclaims"><th scope="row">Reclaims</th><td class="live">1</td><td class="override">2</td><td>+1</td>' in page
    assert '<td class="live">1.5</td><td class="override">9.0</td><td>+7.5</td>' in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;/" in page
    assert ('<td>kept</td><td>reclaimed <time datetime="2026-11-02T14:00:00Z" title="2026-11-02 14:00:00 UTC">'
            '2026-11-02 14:00 UTC</time> (gpu-idle)</td><td>0.00 → 2.50</td>') in page
    # a GET form (bookmarkable): no XSRF token goes into its address
    assert '<form method="get" action="/services/gpu-reclaim/admin/whatif"' in page and 'name="_xsrf"' not in page
    assert "idle_reclaim_after: 90m</textarea>" in page
    # per rule, the users interrupted by how soon they came back; the live arm reclaimed by no rule here
    assert ('<tr data-arm="override" data-rule="gpu-idle"><td>Override</td><td>gpu-idle</td><td>2</td><td>9.00</td>'
            '<td>1</td><td>1</td><td>0</td><td>0</td><td>0</td><td>1</td></tr>') in page
    assert '<tr data-arm="live"><td>Live policy</td><td colspan="9">no reclaim</td></tr>' in page
    assert "<th>back &lt; 30 min</th>" in page and "<th>never back</th>" in page
    assert '<tr data-row="users_interrupted">' in page


def test_one_whatif_at_a_time_and_bad_input_never_waits():
    import asyncio
    from types import SimpleNamespace

    from tornado.web import HTTPError

    from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
    from jupyterhub_gpu_reclaim.web import whatif_runner

    handler = SimpleNamespace(ctx=SimpleNamespace(settings=ServiceSettings(), store=None), retry_after=0)

    async def while_another_runs():
        async with whatif_runner._running:
            with pytest.raises(BadInput, match="unknown policy setting threshold"):
                await whatif_runner.run_what_if(handler, "3h", "", {"threshold": 9})
            with pytest.raises(BadInput, match="until: not a time or a duration"):
                await whatif_runner.run_what_if(handler, "3h", "later", {"gpu_idle_threshold": 9})
            assert handler.retry_after == 0
            with pytest.raises(HTTPError) as refused:
                await whatif_runner.run_what_if(handler, "3h", "", {"gpu_idle_threshold": 9})
        return refused.value

    refused = asyncio.run(while_another_runs())
    assert refused.status_code == 429 and "another what-if is running" in refused.log_message
    assert handler.retry_after == whatif_runner.RETRY_AFTER_S


def test_the_whatif_override_is_setting_value_lines():
    from jupyterhub_gpu_reclaim.web.inputs import parse_override

    text = """# a comment
    idle_reclaim_after: 90m
    gpu_idle_threshold: 5.5
    pressure_only: true
    max_age: null
    exempt_users: [alice, "bob"]
    exempt_groups: staff
    """
    assert parse_override(text) == {"idle_reclaim_after": "90m", "gpu_idle_threshold": 5.5, "pressure_only": True,
                                    "max_age": None, "exempt_users": ["alice", "bob"], "exempt_groups": "staff"}
    assert parse_override("  \n") == {}
    for bad, message in (("idle_reclaim_after = 90m", "line 1: write one `setting: value` per line"),
                         ("x: 1\n- idle_reclaim_after", "line 2: write one `setting: value`"),
                         ("1: 2", "line 1: write one"),
                         ("x: 1\nx: 2", "line 2: x is given twice"),
                         ("x" * 9000, "at most 8192 characters")):
        with pytest.raises(BadInput, match=message):
            parse_override(bad)
    # deep nesting is a text like any other (never parsed as nested lists)
    assert parse_override("x: " + "[" * 8000) == {"x": "[" * 8000}
    assert parse_override("x: " + "[" * 4000 + "]" * 4000)["x"] == ["[" * 3999 + "]" * 3999]


def test_times_in_free_text_are_shown_as_times_and_the_rest_is_escaped():
    from jupyterhub_gpu_reclaim.web.render import readable, when

    reason = "GPU not used since 2026-11-02T12:15:16.452204+00:00 <script>x</script>; warning at 2026-11-02T13:00:00Z"
    html = str(readable(reason))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<time ") == 2 and ".452204" not in html.split(">", 1)[1].split("<", 1)[0]
    assert '<time datetime="2026-11-02T12:15:16.452204Z" title="2026-11-02 12:15:16 UTC">' in html
    assert str(when(None)) == "" and str(readable(None)) == ""
    assert "title=\"2026-11-02 13:00:00 UTC\"" in str(when("2026-11-02T14:00:00+01:00"))


def test_usage_chart_stacks_in_use_idle_and_freed_beside_the_queue():
    from jupyterhub_gpu_reclaim.service.daily_hours import DayUsage
    from jupyterhub_gpu_reclaim.web.chart import usage_chart

    day = dt.timedelta(days=1)
    start = NOW.replace(hour=0, minute=0) - day
    days = [DayUsage(start, start + day, held=28, idle=26, freed=0, waiting=0),
            DayUsage(start + day, NOW, held=16, idle=16, freed=20, waiting=0.5)]
    svg = usage_chart(days)
    assert svg.startswith('<svg class="usage-chart"') and 'aria-labelledby="usage-chart-title usage-chart-desc"' in svg
    assert "44 GPU-hours held, 42 of them idle, 20 freed by reclaims; pods waited for 0.5 GPU-hours" in svg
    assert svg.count("<rect") == 2 * (3 + 1) + 4  # per day 3 layers and the queue's; the legend's four
    assert ": 0.00 GPU-hours in use, 16.00 GPU-hours idle, 20.00 GPU-hours freed</title>" in svg
    assert ">50</text>" in svg and ">25</text>" in svg  # a round top above the largest stack (36)


def test_hostile_or_malformed_times_never_break_a_page():
    """A server named like an instant out of range, or stored evidence that is not a time,
    is shown as written (escaped), never a 500."""
    from jupyterhub_gpu_reclaim.store.reclaims import ReclaimRecord
    from jupyterhub_gpu_reclaim.web.render import readable, reclaim_notice, say, when

    out_of_range = "9999-12-31T23:59:59-23:59"
    assert str(when(out_of_range)) == out_of_range
    assert str(when("<b>noon</b>")) == "&lt;b&gt;noon&lt;/b&gt;"
    assert out_of_range in str(readable(f"server {out_of_range} idle since 2026-11-02T13:00:00Z"))
    assert str(readable(f"server {out_of_range}")).count("<time ") == 0
    r = ReclaimRecord(1, "ann/9999-12-31T23:59:59-23:59", "ep", "gpu-idle",
                      dt.datetime(2026, 11, 2, 13, tzinfo=dt.timezone.utc), 1, {"idle_since": "yesterday"},
                      None, None, "")
    text = reclaim_notice(r).text(r.t)
    assert "Your server '9999-12-31T23:59:59-23:59' was stopped at 13:00 UTC (now)" in text
    assert "the GPU has not been used since the server started" in text and "gpu-idle" not in text
    assert str(say(reclaim_notice(r))).count("<time ") == 1
