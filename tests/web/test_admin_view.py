"""The admin page's headline numbers (web/admin_view.py) from a store filled as the service
fills it, and its words: capacity first, counts with their plurals, what a confirmation
overrides. Without a hub (tests/web/test_browser.py drives the page in Chromium)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Decision, Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.service.status import CycleStatus, SessionStatus, WaitingServer, session_status
from jupyterhub_gpu_reclaim.service.daily_hours import daily_usage
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.signals.pods import pod_info
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.web import render
from jupyterhub_gpu_reclaim.web.admin_view import admin_data

from ..support.clock import at
from ..support.signal_inputs import k8s_pod

NOW = at(hours=6)  # 14:00 UTC
MIN = dt.timedelta(minutes=1)


def running(sid: str, gpus: int, **kw) -> SessionStatus:
    user, _, server = sid.partition("/")
    return SessionStatus(**{"session": sid, "user": user, "server": server, "gpus": gpus, "action": "keep",
                            "rule": "gpu-active", **kw})


@pytest.fixture
def store(tmp_path):
    """The demo's story an instant after the admin's reclaims: alice (2 GPUs) and carol
    (1 GPU) started at 12:00, idle from 12:30, reclaimed two minutes ago; bob (1 GPU) busy."""
    with Store.open(tmp_path / "reclaim.sqlite") as s:
        for sid, gpus in (("alice/", 2), ("carol/", 1), ("bob/", 1)):
            user = sid.rstrip("/")
            session = Session(id=sid, user=user, server="", gpus=gpus, started=at(hours=4))
            s.record_observations(at(hours=4), [SessionSample(sid, Sample(t=at(hours=4), gpu_util=(0.0,) * gpus))],
                                  pending_gpus=None, sessions=[session])
            s.record_decisions([Decision(session=sid, action="keep", rule="gpu-busy", reason="")], at(hours=4))
        for sid, gpus in (("alice/", 2), ("carol/", 1)):
            s.record_decisions([Decision(session=sid, action="keep", rule="gpu-idle", reason="")], at(hours=4.5))
            rid = s.begin_reclaim(sid, "admin", NOW - 3 * MIN, {"by": "admin"}, gpus, episode="e")
            s.finish_reclaim(rid, NOW - 2 * MIN, "stopped")
            s.session_stopped(sid, NOW - 2 * MIN)
        yield s


def test_numbers_right_after_reclaims_are_true(store):
    """The reclaims count from their stop (3 GPUs freed by 2 reclaims), and the idle time of
    the reclaimed sessions still counts today: the headline's numbers are the chart's."""
    status = CycleStatus(t=NOW, sessions={"bob/": running("bob/", 1)}, gpu_capacity={"gpu": 4})
    totals = admin_data(status, store, ServiceSettings(), NOW)["totals"]
    today = daily_usage(store, NOW)[-1]
    assert (totals["gpus_held"], totals["gpu_capacity"], totals["gpus_idle"]) == (1, {"gpu": 4}, 0)
    assert (totals["reclaims_7d"], totals["gpus_freed_7d"]) == (2, 3)
    # alice 2 GPUs and carol 1, idle from 12:30 to 13:58
    assert totals["gpu_hours_idle_today"] == today.idle == round(3 * (88 / 60), 2)
    assert totals["gpu_hours_freed_7d"] == round(sum(d.freed for d in daily_usage(store, NOW)), 2) == 0.1


def test_an_idle_session_reclaimed_still_counts_idle_today(store):
    """Once the idle sessions are gone from the cycle, "idle today" stays what the record says."""
    before = admin_data(CycleStatus(t=NOW - 5 * MIN, sessions={}), store, ServiceSettings(), NOW - 5 * MIN)
    after = admin_data(CycleStatus(t=NOW, sessions={}), store, ServiceSettings(), NOW)
    assert 0 < before["totals"]["gpu_hours_idle_today"] < after["totals"]["gpu_hours_idle_today"]


def headline(status: CycleStatus, store=None) -> str:
    page = render._jinja.get_template("admin.html").render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True, dry_run=False, xsrf="t",
        now=NOW, sparkline=render.sparkline, state_of=render.state_of, quote=lambda s, safe="": s,
        data=admin_data(status, store, ServiceSettings(), NOW), infos=status.sessions, notice="", error="",
        refresh_s=10)
    section = re.search(r'<section id="headline".*?</section>', page, re.S)
    assert section
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", section.group(0))).strip()


def test_the_headline_says_capacity_first_with_plurals(monkeypatch, store):
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    sessions = {"alice/": running("alice/", 2), "bob/": running("bob/", 1, rule="gpu-idle")}
    dave = WaitingServer(session="dave/", user="dave", server="", kinds={"gpu": 2}, since=NOW - 4 * MIN, waited_s=240,
                         reason="", expected_free_at=NOW + 6 * MIN)
    text = headline(CycleStatus(t=NOW, sessions=sessions, queue=[dave], gpu_capacity={"gpu": 4}), store)
    assert text.startswith("3 of 4 GPUs held, 1 idle; 1 spawn waiting for 2 GPUs, expected free 14:06 UTC (in 6 min)")
    assert "2 reclaims freed 3 GPUs in the last 7 days (6 min of GPU time given back so far)" in text
    one = headline(CycleStatus(t=NOW, sessions={"bob/": running("bob/", 1)}, queue=[dave, dave], gpu_capacity={"gpu": 1}))
    assert one.startswith("1 of 1 GPU held, 0 idle; 2 spawns waiting for 4 GPUs, the first expected free")
    assert "no GPU time idle today · no reclaim in the last 7 days · as of 14:00 UTC (now)" in one
    # MIG slices and shared GPUs by their names
    kinds = {"alice/": running("alice/", 2, gpu_kinds=(("mig", 2),)), "bob/": running("bob/", 1, rule="gpu-idle")}
    mixed = headline(CycleStatus(t=NOW, sessions=kinds, gpu_capacity={"gpu": 2, "mig": 7, "shared": 4}))
    assert mixed.startswith("3 held (1 of 2 GPUs, 2 of 7 MIG slices and 0 of 4 shared GPUs), 1 idle"), mixed
    # the cluster's GPUs not known: what is held
    assert headline(CycleStatus(t=NOW, sessions=sessions)).startswith("3 GPUs held, 1 idle; nobody waiting for a GPU")


def confirm(action: str, info: SessionStatus | None) -> str:
    page = render._jinja.get_template("confirm.html").render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True, dry_run=False, xsrf="t",
        now=NOW, action=action, session="alice/", hours="4" if action == "exempt" else None, info=info)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page[page.index("<main"):page.index("<form")]))


def test_the_confirmation_names_the_keep_alive_it_overrides(monkeypatch):
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    kept = running("alice/", 1, intent_until=NOW + 90 * MIN, warned_at=NOW - 5 * MIN, reclaim_at=NOW + MIN)
    assert "alice asked to keep this server alive until 15:30 UTC (in 1 h 30 min); reclaiming now overrides that." \
        in confirm("reclaim", kept)
    assert "alice asked to keep this server alive until 15:30 UTC" in confirm("clear-intent", kept)
    assert "asked to keep" not in confirm("exempt", kept)
    # a keep-alive that ran out, or none: nothing to override
    for info in (running("alice/", 1, intent_until=NOW - MIN), running("alice/", 1), None):
        assert "asked to keep" not in confirm("reclaim", info)
    exempt = running("alice/", 1, exempt_until=NOW + 60 * MIN, exempt_by="root")
    assert "It is exempt from reclaim until 15:00 UTC (in 1 h) (root); reclaiming now overrides that." \
        in confirm("reclaim", exempt)


def waiting_text(template: str, queue: list[WaitingServer], **ns) -> str:
    page = render._jinja.get_template(template).render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "nia"}, is_admin=False, dry_run=False, xsrf="t", now=NOW,
        sessions=[], queue=queue, reclaims=[], reclaimed=[], selected="", error="", notice="", presets=[1],
        cap_text="4 h", cycle_t=NOW, **ns)
    return " ".join(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", m)).strip()
                    for m in re.findall(r'<strong class="state-text">.*?</p>', page, re.S))


def test_a_waiting_user_reads_the_kind_the_spawn_page_names(monkeypatch):
    """The user page and the hub home page's embed say what the spawn page says
    (spawner/messages.gpu_wait_message): MIG slices and shared GPUs by their names, a
    whole GPU as a GPU; the admin page's headline and queue alike."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    nia = WaitingServer(session="nia/", user="nia", server="", kinds={"mig": 2}, since=NOW - 4 * MIN, waited_s=240,
                        reason="", expected_free_at=NOW + 3 * MIN)
    tom = WaitingServer(session="tom/big", user="tom", server="big", kinds={"gpu": 1}, since=NOW - MIN, waited_s=60,
                        reason="")
    assert waiting_text("user.html", [nia]) == (
        "waiting for a MIG slice since 13:56 UTC (4 min ago) (2 MIG slices): "
        "a MIG slice is expected to be free in about 3 min")
    assert waiting_text("embed_home.html", [nia, tom]) == (
        "default server: waiting for a MIG slice since 13:56 UTC (4 min ago) (2 MIG slices): "
        "a MIG slice is expected to be free in about 3 min "
        "big: waiting for a GPU since 13:59 UTC (1 min ago) (1 GPU)")
    text = headline(CycleStatus(t=NOW, sessions={}, queue=[nia, tom], gpu_capacity={"gpu": 1, "mig": 7}))
    assert "; 2 spawns waiting for 1 GPU and 2 MIG slices, the first expected free 14:03 UTC" in text, text
    page = render._jinja.get_template("admin.html").render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True, dry_run=False, xsrf="t",
        now=NOW, sparkline=render.sparkline, state_of=render.state_of, quote=lambda s, safe="": s,
        data=admin_data(CycleStatus(t=NOW, queue=[nia, tom]), None, ServiceSettings(), NOW), infos={},
        notice="", error="", refresh_s=10)
    assert re.findall(r'<td data-sort="\d+">([^<]*)</td>', page) == ["2 MIG slices", "1 GPU"]


def on_pod(user: str, limits: dict[str, str], product: str = "") -> SessionStatus:
    """`user`'s running server as the cycle publishes it, from its pod asking for `limits` on
    nodes of `product` (its nodeSelector)."""
    pod = k8s_pod(f"jupyter-{user}", user, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    if product:
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
    info = pod_info(pod)
    session = Session(id=f"{user}/", user=user, server="", gpus=info.gpus, started=NOW - 30 * MIN,
                      gpu_type=info.gpu_type, gpu_shared=info.gpu_shared)
    return session_status(session, Sample(t=NOW, gpu_util=(40.0,) * info.gpus), None, pod=info, url="",
                          hub_last_activity=None, history=[], warnings=[], intent=None, exemption=None,
                          max_keepalive=dt.timedelta(hours=4), stopping=False)


def test_a_running_session_reads_the_kind_the_waiting_lines_name(monkeypatch):
    """A running server's GPUs are named on its card (the user page, the hub home page's
    embed) and in the admin page's column as the waiting lines and the spawn page name them:
    MIG slices and shared GPUs by their names, a pod asking for two kinds with both; whole
    GPUs as ever, a number under "GPUs". The column sorts by the number."""
    monkeypatch.setattr(render, "utcnow", lambda: NOW)
    sessions = [on_pod("mia", {"nvidia.com/mig-1g.10gb": "1"}),
                on_pod("tia", {"nvidia.com/gpu": "1"}, "Tesla-T4-SHARED"), on_pod("rex", {"nvidia.com/gpu.shared": "2"}),
                on_pod("kim", {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2"}),
                on_pod("bob", {"nvidia.com/gpu": "2"}), running("old/", 1)]  # old: a status without its pod's kinds
    said = ["1 MIG slice", "1 shared GPU", "2 shared GPUs", "1 GPU and 2 MIG slices", "2", "1"]
    for template in ("user.html", "embed_home.html"):
        page = render._jinja.get_template(template).render(
            prefix="/p/", hub_prefix="/hub/", user={"name": "mia"}, is_admin=False, dry_run=False, xsrf="t", now=NOW,
            sessions=sessions, queue=[], reclaims=[], reclaimed=[], selected="", error="", notice="", presets=[1],
            cap_text="4 h", cycle_t=NOW, sparkline=render.sparkline, state_of=render.state_of,
            quote=lambda s, safe="": s)
        cards = re.findall(r'<dt class="col-sm-3">GPUs</dt><dd class="col-sm-9 gpus">([^<]*)</dd>', page)
        assert cards == said, template
    status = CycleStatus(t=NOW, sessions={s.session: s for s in sessions})
    data = admin_data(status, None, ServiceSettings(), NOW)
    page = render._jinja.get_template("admin.html").render(
        prefix="/p/", hub_prefix="/hub/", user={"name": "admin"}, is_admin=True, dry_run=False, xsrf="t", now=NOW,
        sparkline=render.sparkline, state_of=render.state_of, quote=lambda s, safe="": s, data=data,
        infos=status.sessions, notice="", error="", refresh_s=10)
    cells = re.findall(r'<tr data-session="(\w+)/".*?<td class="gpus" data-sort="(\d+)">([^<]*)', page, re.S)
    by_user = {"bob": ("2", "2"), "kim": ("3", "1 GPU and 2 MIG slices"), "mia": ("1", "1 MIG slice"),
               "old": ("1", "1"), "rex": ("2", "2 shared GPUs"), "tia": ("1", "1 shared GPU")}
    assert {u: (n, text.strip()) for u, n, text in cells} == by_user  # (then the badges)
    # the API (and the JupyterLab extension's status item, from it) says them in the same words
    assert [(s["kinds"], s["gpus_text"]) for s in data["sessions"]] == [
        ({"gpu": 2}, "2 GPUs"), ({"gpu": 1, "mig": 2}, "1 GPU and 2 MIG slices"), ({"mig": 1}, "1 MIG slice"),
        ({"gpu": 1}, "1 GPU"), ({"shared": 2}, "2 shared GPUs"), ({"shared": 1}, "1 shared GPU")]
