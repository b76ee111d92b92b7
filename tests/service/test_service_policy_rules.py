"""Policy rules (policy/rules.py) in the reclaim cycle (service.Reclaimer, with the in-process
fakes of tests/support/harness.py): each session timed by the rule that matches it (by the
profile the spawner applied), the rule named in its decisions, and the history a restart
reloads reaching back as far as a rule needs."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.rules import load_rules
from jupyterhub_gpu_reclaim.signals.pod_facts import PROFILE_ANNOTATION
from jupyterhub_gpu_reclaim.signals.pods import PodInfo, pod_info
from jupyterhub_gpu_reclaim.timestamps import format_time

from ..support.clock import START, YALE_NEVER_USED, at
from ..support.cycles import NS


async def test_policy_rules_by_profile_and_group_time_each_session_apart(harness):
    """Two profiles under different idle timings, a group rule ahead of them (first match
    wins) and a session no rule matches (the options): each is warned and reclaimed on its
    own clock, and its decisions name the rule."""
    rules = load_rules([
        {"name": "course", "match": {"groups": ["course-101"]},
         "set": {"idle_warn_after": "30m", "idle_reclaim_after": "45m"}},
        {"name": "gpu-short", "match": {"profiles": ["gpu-short"]},
         "set": {"idle_warn_after": "20m", "idle_reclaim_after": "40m"}},
        {"name": "gpu-long", "match": {"profiles": ["gpu-long"]},
         "set": {"idle_warn_after": "90m", "idle_reclaim_after": "150m"}},
    ], PolicyConfig())
    h = harness(rules=rules)
    short = h.add("alice", user_options={"profile": "gpu-short"})
    long = h.add("bob", user_options={"profile": "gpu-long"})
    course = h.add("carol", user_options={"profile": "gpu-long"}, groups=("course-101",))
    default = h.add("dave")

    def each(t):  # every GPU used until 10 min, idle after
        for user in ("alice", "bob", "carol", "dave"):
            h.set_util(user, (60.0,) if t <= at(10) else (0.0,))

    await h.run_until(at(25), each)
    status = h.reclaimer.status.sessions
    assert {sid: status[sid].policy_rule for sid in (short, long, course, default)} == {
        short: "gpu-short", long: "gpu-long", course: "course", default: None}
    await h.run_until(at(170), each)

    # idle since 10 min: the rule's idle_warn_after, then its idle_reclaim_after
    assert (h.warned(short), h.stopped(short)) == ([at(30)], [at(50)])
    assert (h.warned(course), h.stopped(course)) == ([at(40)], [at(55)])
    assert (h.warned(default), h.stopped(default)) == ([at(70)], [at(130)])  # the options: 60 / 120 min
    assert (h.warned(long), h.stopped(long)) == ([at(100)], [at(160)])
    for sid, name in ((short, "gpu-short"), (long, "gpu-long"), (course, "course"), (default, None)):
        assert {r.decisions[sid].policy_rule for r in h.reports if sid in r.decisions} == {name}
    reclaims = {r.session: r for r in h.store.reclaims()}
    assert reclaims[short].rule == "gpu-idle" and reclaims[short].evidence["policy_rule"] == "gpu-short"
    assert reclaims[default].evidence["policy_rule"] is None


def spawned_pod(user: str, annotations: dict[str, str]) -> PodInfo:
    """`user`'s 1-GPU pod as the API serves it, with the spawner's `annotations`, read as the
    pods signal reads it."""
    keys = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}
    return pod_info({
        "metadata": {"name": f"jupyter-{user}", "namespace": NS, "creationTimestamp": format_time(START),
                     "annotations": {**keys, **annotations}, "labels": keys},
        "spec": {"nodeName": "gpu-node-1", "containers": [{
            "name": "notebook", "ports": [{"name": "notebook-port", "containerPort": 8888}],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.7",
                   "containerStatuses": [{"name": "notebook", "ready": True}]}})


async def test_a_profile_rule_matches_the_profile_the_spawner_applied_not_the_one_named(harness):
    """The finding: "course" targets gpu-course, the default profile. A spawn that names no
    profile (`{}` through the API, a link, the form's `profile=` empty) gets that profile's
    pod; the rule follows the pod's annotation, not the empty user_options. A pod without
    the annotation (a plain KubeSpawner's, one from before) keeps the named profile."""
    rules = load_rules([{"name": "course", "match": {"profiles": ["gpu-course"]},
                         "set": {"never_used_warn_after": "10m", "never_used_reclaim_after": "25m"}}],
                       PolicyConfig(**YALE_NEVER_USED))
    h = harness(rules=rules)
    cases = {  # user: (user_options, the spawner's annotations, the rule that must apply)
        "ann": ({}, {PROFILE_ANNOTATION: "gpu-course"}, "course"),  # the finding's spawn
        "bob": ({"profile": ""}, {PROFILE_ANNOTATION: "gpu-course"}, "course"),
        "cat": ({"profile": "gpu-1"}, {PROFILE_ANNOTATION: "gpu-1"}, None),
        "dan": ({}, {}, None),  # no annotation: today's behaviour, the named profile
        "eve": ({"profile": "gpu-course"}, {}, "course"),
    }
    for user, (options, written, _) in cases.items():
        sid = h.add(user, user_options=options)
        h.pods.pods[sid] = spawned_pod(user, written)
    await h.run_until(at(5))
    status = h.reclaimer.status.sessions
    assert {user: status[f"{user}/"].policy_rule for user in cases} == {u: c[2] for u, c in cases.items()}
    assert (status["ann/"].profile, status["cat/"].profile, status["dan/"].profile) == ("gpu-course", "gpu-1", "")
    await h.run_until(at(25))
    # the course rule's timings for ann, bob and eve, the options' (30 / 60 min) for the others
    assert all(h.warned(f"{u}/") == [at(10)] and h.stopped(f"{u}/") == [at(25)] for u in ("ann", "bob", "eve"))
    assert all(h.warned(f"{u}/") == [] and h.stopped(f"{u}/") == [] for u in ("cat", "dan"))


async def test_without_policy_rules_the_evidence_has_no_rule_key(harness):
    h = harness()
    sid = h.add("alice", user_options={"profile": "gpu-short"})
    await h.run_until(at(10))
    assert all("policy_rule" not in r.decisions[sid].shown() for r in h.reports)
    assert h.reclaimer.status.sessions[sid].policy_rule is None


async def test_after_a_restart_the_history_reaches_back_as_far_as_a_policy_rule_needs(harness):
    """A rule's longer timings need older samples than the options do: a restart reloads
    them, so the GPU's last use is still seen (not mistaken for a GPU never used)."""
    rules = load_rules([{"name": "long", "match": {"profiles": ["gpu-long"]},
                         "set": {"idle_warn_after": "5h", "idle_reclaim_after": "6h"}}], PolicyConfig())
    h = harness(rules=rules)
    sid = h.add("alice", user_options={"profile": "gpu-long"})

    def each(t):
        h.set_util("alice", (60.0,) if t <= at(10) else (0.0,))

    await h.run_until(at(hours=5, minutes=30), each)
    assert h.warned(sid) == [at(hours=5, minutes=10)] and h.stopped(sid) == []
    h.new_reclaimer()  # the options' own lookback (4 h 20 min) would miss the use at 10 min
    await h.run_until(at(hours=6, minutes=30), each)
    assert h.stopped(sid) == [at(hours=6, minutes=10)]
    assert {r.decisions[sid].rule for r in h.reports if sid in r.decisions and r.t > at(10)} == {"gpu-idle"}
