"""`policy.step`: one session's decision and its warnings after it, as the service's cycle,
the backtest and the what-if all run it."""

from __future__ import annotations

import dataclasses
import json

from jupyterhub_gpu_reclaim.policy.observations import Exemption, SessionView, Warning
from jupyterhub_gpu_reclaim.policy.evidence import Exempt
from jupyterhub_gpu_reclaim.policy.rules import AppliedPolicy, PolicyRules, load_rules
from jupyterhub_gpu_reclaim.policy.step import step

from ..support.clock import at
from ..support.policy_inputs import CFG, samples, session, warned

POLICY = AppliedPolicy(CFG)


def never_used(until: float) -> SessionView:
    return SessionView(session(), samples(lambda k: 0, until))


def test_a_warning_is_added_to_the_sessions_warnings():
    done = step(never_used(30), now=at(30), pending_gpus=1, policy=POLICY)
    assert done.decision.action == "warn"
    assert done.warnings == (Warning("alice/", at(30), "gpu-never-used", at(60)),)


def test_a_finished_episodes_warnings_are_dropped_before_the_new_one_is_added():
    # warned at 30, then the GPU was used at 45: the old warning is cleared, and 60 min
    # later the new episode's warning comes
    view = SessionView(session(), samples(lambda k: 80 if k == 45 else 0, 105),
                       warnings=(warned("gpu-never-used", 30, 60),))
    done = step(view, now=at(105), pending_gpus=1, policy=POLICY)
    d = done.decision
    assert (d.action, d.rule, d.idle_since) == ("warn", "gpu-idle", at(45))
    assert d.cleared == view.warnings
    assert done.warnings == (Warning("alice/", at(105), "gpu-idle", d.reclaim_at),)
    shown = d.shown()
    assert shown["episode_cleared"] is True and shown["cleared_warnings"] == [at(30).isoformat()]
    assert shown["idle_since"] == at(45).isoformat()


def test_a_kept_warning_stays_and_nothing_is_added_while_waiting():
    view = dataclasses.replace(never_used(40), warnings=(warned("gpu-never-used", 30, 60),))
    done = step(view, now=at(40), pending_gpus=1, policy=POLICY)
    assert (done.decision.action, done.decision.cleared) == ("keep", ())
    assert done.warnings == view.warnings


def test_the_policy_rule_is_named_only_under_rules():
    rules = load_rules([{"name": "short", "match": {"users": ["alice"]},
                         "set": {"never_used_warn_after": "10m"}}], CFG)
    d = step(never_used(10), now=at(10), pending_gpus=1, policy=rules.applied(session())).decision
    assert (d.action, d.policy_rule, d.under_rules) == ("warn", "short", True)
    assert d.shown()["policy_rule"] == "short"
    base = load_rules([{"name": "other", "match": {"users": ["bob"]}, "set": {}}], CFG)
    d = step(never_used(10), now=at(10), pending_gpus=1, policy=base.applied(session())).decision
    assert d.policy_rule is None and d.shown()["policy_rule"] is None  # the base policy, named
    d = step(never_used(10), now=at(10), pending_gpus=1,
             policy=PolicyRules(CFG).applied(session())).decision
    assert not d.under_rules and "policy_rule" not in d.shown()  # no rules, no key


def test_an_exemption_keeps_the_session_and_sends_no_warning():
    ex = Exemption("alice/", until=at(120), set_at=at(0), by="root")
    view = dataclasses.replace(never_used(30), warnings=(warned("gpu-idle", 1, 2),))
    done = step(view, now=at(30), pending_gpus=1, policy=POLICY, exemption=ex)
    d = done.decision
    assert (d.action, d.rule, d.reclaim_at) == ("keep", "exempt", None)
    assert d.exempt == Exempt("admin", by="root", until=at(120))
    assert d.shown()["exempt_by"] == "root" and d.shown()["exempt_until"] == "2026-11-02T10:00:00Z"
    assert done.warnings == view.warnings  # nothing sent, nothing cleared
    json.dumps(d.shown())
