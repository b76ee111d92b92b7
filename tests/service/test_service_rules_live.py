"""Policy rules by profile and group in the live service: a real JupyterHub runs
jupyterhub-gpu-reclaim as a managed service with `--policy-rules` over KubeSpawner on the
simulated cluster. Three users start a 1-GPU server at the same time and never use it:

- ann, spawned with `{}` (no profile named: the hub's default, gpu-course, applies): the
  rule "course" on gpu-course (never used: warned after 3 s, reclaimed after 6 s, 3 s after
  the warning at the earliest) reclaims her first, as the pod's profile, not her empty
  user_options, decides;
- ben, on profile gpu-1 and in the group "lab": the rule "lab" (warned after 30 s,
  reclaimed after 10 min) keeps him past ann's reclaim, then warns him (30 s, not less: the
  three servers start together but not at the same instant, and a loaded machine's cycles
  run late, so ann's reclaim can come over 10 s after her 6 s);
- cat, on profile gpu-1 in no group: no rule matches (the group decides), so the service's
  options apply (warned after 10 s, reclaimed after 120 s).

Its own hub, not test_service_live.py's: that scene has every GPU of the cluster taken
while a fifth user waits, and what its tests prove depends on it.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import pytest_asyncio

from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.timestamps import parse_time

from ..support.hubapi import HubAPI
from ..support.web_client import PREFIX
from ..support.service_hub import HERE, start_service_hub, until
from ..support.store_reads import decisions_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

RULES = """\
- name: course
  match: {profiles: [gpu-course]}
  set: {never_used_warn_after: 3s, never_used_reclaim_after: 6s, warning_lead: 3s}
- name: lab
  match: {profiles: [gpu-1], groups: [lab]}
  set: {never_used_warn_after: 30s, never_used_reclaim_after: 10m}
"""
# (profile named at the spawn, the rule that should apply, its never-used warning and
# reclaim in seconds)
USERS = {
    "ann": (None, "course", 3, 6),  # {}: the default profile, gpu-course
    "ben": ("gpu-1", "lab", 30, 600),
    "cat": ("gpu-1", None, 10, 120),
}
# the service's options for this hub: the never-used timings cat gets, shorter than
# TIMINGS' (30 s) so that the scene is over once ben is warned, and nobody reclaimed but ann
OPTIONS = {"never_used_warn_after": 10, "never_used_reclaim_after": 120}


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory, webhook):
    workdir = tmp_path_factory.mktemp("hub")
    rules = workdir / "rules.yaml"
    rules.write_text(RULES)
    child = start_service_hub(workdir, sim, webhook, hub_config=HERE / "jupyterhub_config_rules.py",
                              policy_rules=str(rules), **OPTIONS)
    yield child
    child.stop(grace=60)


def first(hub, session: str, action: str) -> tuple[dt.datetime, dict] | None:
    """The time and evidence of the session's first decision `action`, from the store."""
    with Store.open(hub.info["store"]) as store:
        found = [(t, d.evidence) for t, d in decisions_of(store, session) if d.action == action]
    return found[0] if found else None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scene(hub, webhook):
    """The three servers, started together and never used; yields (api, what happened)
    once all are warned; then stops every server."""
    async with HubAPI.of(hub) as api:
        await asyncio.gather(*(api.start(user, profile) for user, (profile, *_) in USERS.items()))
        ready = await asyncio.gather(*(api.wait_ready(user) for user in USERS))
        ann_options = ready[list(USERS).index("ann")]["user_options"]
        await until(lambda: webhook.events("ann/", "reclaim"), 60, "ann's reclaim notice")
        ben_at_ann_reclaim = await api.server("ben")
        await until(lambda: webhook.events("cat/", "warning"), 60, "cat's warning")
        await until(lambda: webhook.events("ben/", "warning"), 90, "ben's warning")
        yield api, {"ben_at_ann_reclaim": ben_at_ann_reclaim, "ann_options": ann_options}


async def test_each_session_is_warned_on_its_rules_timings(hub, scene, webhook):
    for user, (_, rule, warn_after, reclaim_after) in USERS.items():
        warning, = webhook.events(f"{user}/", "warning")
        ev = warning["evidence"]
        assert warning["rule"] == "gpu-never-used" and ev["never_used"] is True, user
        assert ev["policy_rule"] == rule, user
        # the policy's own due times, from the session's start: exactly the rule's settings
        idle_since = parse_time(ev["idle_since"])
        assert parse_time(ev["rule_warn_at"]) - idle_since == dt.timedelta(seconds=warn_after), user
        assert parse_time(ev["rule_reclaim_at"]) - idle_since == dt.timedelta(seconds=reclaim_after), user
        warned_at, _ = first(hub, f"{user}/", "warn")
        assert warned_at >= idle_since + dt.timedelta(seconds=warn_after), user


async def test_the_course_rule_reclaims_while_the_lab_rule_keeps(hub, scene, webhook):
    api, seen = scene
    reclaim, = webhook.events("ann/", "reclaim")
    assert reclaim["rule"] == "gpu-never-used" and reclaim["evidence"]["policy_rule"] == "course"
    assert seen["ann_options"] == {}  # she named no profile: the one applied decided
    assert await api.server("ann") is None
    with Store.open(hub.info["store"]) as store:
        record, = [r for r in store.reclaims() if r.session == "ann/"]
    assert record.outcome == "stopped" and record.rule == "gpu-never-used"
    assert record.evidence["policy_rule"] == "course"
    # the course rule's 3 s warning lead, not the options' 10 s
    warned_at, _ = first(hub, "ann/", "warn")
    assert record.t >= warned_at + dt.timedelta(seconds=3)
    # ben started with ann and idled as she did: in the cycle that reclaimed her, the lab
    # rule kept him, unwarned; he was warned only later, and his server outlived hers
    with Store.open(hub.info["store"]) as store:
        ben_then = [d for t, d in decisions_of(store, "ben/") if t <= record.t][-1]
    assert (ben_then.action, ben_then.rule, ben_then.evidence["policy_rule"]) == ("keep", "gpu-never-used", "lab")
    ben_warned_at, _ = first(hub, "ben/", "warn")
    assert record.t < ben_warned_at
    assert seen["ben_at_ann_reclaim"]["ready"]
    # nobody but ann was reclaimed, and ben's decisions since his warning keep him
    assert [r.session for r in store_reclaims(hub)] == ["ann/"]
    assert (await api.server("ben"))["ready"] and (await api.server("cat"))["ready"]
    ben_warning, = webhook.events("ben/", "warning")
    assert parse_time(ben_warning["reclaim_at"]) >= ben_warned_at + dt.timedelta(minutes=9)


def store_reclaims(hub) -> list:
    with Store.open(hub.info["store"]) as store:
        return store.reclaims()


async def test_the_api_and_the_admin_page_name_each_sessions_rule(hub, scene):
    api, _ = scene
    url = hub.info["url"] + PREFIX

    async def candidates() -> dict[str, dict]:
        # the admin page's data (the tests' token holds the admin scope)
        async with api.session.get(url + "api/admin/candidates") as r:
            assert r.status == 200, await r.text()
            return {s["session"]: s for s in (await r.json())["candidates"]}

    async def ben_shown_warned() -> dict[str, dict] | None:
        # the sessions as of the service's last cycle, which may predate ben's warning
        sessions = await candidates()
        return sessions if sessions["ben/"]["state"] == "warned" else None

    sessions = await until(ben_shown_warned, 30, "ben shown as warned")
    assert {s: (sessions[s]["profile"], sessions[s]["policy_rule"]) for s in ("ben/", "cat/")} == {
        "ben/": ("gpu-1", "lab"), "cat/": ("gpu-1", None)}
    assert "ann/" not in sessions
    # the admin page: each ruled session's badge, and the rules in order under Policy
    async with api.session.get(url + "admin") as r:
        assert r.status == 200, await r.text()
        page = await r.text()
    assert "rules: lab" in page and "rules: course" not in page  # ann is gone
    assert page.count('class="policy-rule"') == 1  # cat has the options: no badge
    assert "course, lab (first match wins)" in page
