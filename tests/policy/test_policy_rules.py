"""Policy rules (policy/rules.py): matching, first match wins, and the checks at load time,
each error naming its rule."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from jupyterhub_gpu_reclaim.errors import ConfigError
from jupyterhub_gpu_reclaim.policy.observations import Session
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.rules import AppliedPolicy, Match, PolicyRules, load_rules

from ..support.clock import START

BASE = PolicyConfig()
MIN = dt.timedelta(minutes=1)


def session(user: str = "alice", server: str = "", **kw) -> Session:
    return Session(id=f"{user}/{server}", user=user, server=server, gpus=1, started=START, **kw)


RULES = [
    {"name": "course", "match": {"groups": ["course-101"]}, "set": {"idle_reclaim_after": "45m",
                                                                    "idle_warn_after": "30m"}},
    {"name": "short", "match": {"profiles": ["gpu-short", "gpu-tiny"], "server": "default"},
     "set": {"idle_warn_after": "20m", "idle_reclaim_after": "40m"}},
    {"name": "a100", "match": {"gpu_types": "NVIDIA-A100-SXM4-80GB"}, "set": {"gpu_idle_threshold": 5}},
    {"name": "named", "match": {"server": "named", "users": ["bob"]}, "set": {"max_age": "8h"}},
    {"name": "pinned", "match": {"users": ["carol"]}},  # the base policy, ahead of later rules
    {"name": "everyone-else", "set": {"pressure_only": True}},
]


@pytest.fixture
def rules() -> PolicyRules:
    return load_rules(RULES, BASE)


def test_each_criterion_matches(rules):
    assert rules.names == ["course", "short", "a100", "named", "pinned", "everyone-else"]
    assert rules.applied(session(groups=frozenset({"x", "course-101"}))).rule == "course"
    assert rules.applied(session(profile="gpu-tiny")).rule == "short"
    assert rules.applied(session(server="lab", profile="gpu-tiny")).rule == "everyone-else"  # default only
    assert rules.applied(session(gpu_type="NVIDIA-A100-SXM4-80GB")).rule == "a100"
    assert rules.applied(session("bob", "lab")).rule == "named"
    assert rules.applied(session("bob")).rule == "everyone-else"  # his default server is not named
    assert rules.applied(session("dave", "lab")).rule == "everyone-else"  # not one of the users


def test_the_first_match_wins_and_sets_only_its_settings(rules):
    both = session(profile="gpu-short", groups=frozenset({"course-101"}), gpu_type="NVIDIA-A100-SXM4-80GB")
    applied = rules.applied(both)
    config = applied.config
    assert applied.rule == "course"
    assert (config.idle_warn_after, config.idle_reclaim_after) == (30 * MIN, 45 * MIN)
    assert config.gpu_idle_threshold == BASE.gpu_idle_threshold  # the a100 rule does not apply too
    assert config == dataclasses.replace(BASE, idle_warn_after=30 * MIN, idle_reclaim_after=45 * MIN)
    assert rules.applied(session("carol", profile="gpu-short")) == AppliedPolicy(rules.rules[1].config, "short", True)
    assert rules.applied(session("carol", "lab")) == AppliedPolicy(BASE, "pinned", True)


def test_rules_apply_over_the_base_and_are_built_once():
    base = PolicyConfig(gpu_idle_threshold=3, idle_reclaim_after=dt.timedelta(hours=3))
    rules = load_rules(RULES, base)
    config = rules.applied(session(profile="gpu-short")).config
    assert config.gpu_idle_threshold == 3 and config.idle_reclaim_after == 40 * MIN
    assert rules.applied(session(profile="gpu-short")).config is config
    assert rules.configs == [base, *(r.config for r in rules.rules)]


@pytest.mark.parametrize("data", [None, []])
def test_no_rules_change_nothing(data):
    rules = load_rules(data, BASE)
    assert rules == PolicyRules(BASE) and rules.names == []
    assert rules.applied(session(profile="gpu-short", groups=frozenset({"course-101"}))) == AppliedPolicy(BASE)


def test_an_empty_match_matches_every_session():
    rules = load_rules([{"name": "all", "match": {}, "set": {"warning_lead": "30m"}}], BASE)
    assert rules.rules[0].match == Match()
    assert rules.applied(session("zed", "x")).config.warning_lead == 30 * MIN


def rule(**kw):
    return {"name": "gpu-course", "match": {"profiles": ["gpu-course"]}, "set": {}, **kw}


@pytest.mark.parametrize("data, message", [
    ([rule(set={"idle_warn_aftr": "20m"})], 'policy rule "gpu-course": unknown setting "idle_warn_aftr"'),
    ([rule(match={"profile": ["x"]})], 'policy rule "gpu-course": unknown criterion "profile"'),
    ([rule(match={"server": "main"})], 'policy rule "gpu-course": match server must be "default" or "named"'),
    ([rule(match={"groups": [1]})], 'policy rule "gpu-course": match groups must be a list of strings'),
    ([rule(match=["gpu-course"])], 'policy rule "gpu-course": match must be a mapping'),
    ([rule(set={"idle_reclaim_after": "soon"})], 'policy rule "gpu-course": idle_reclaim_after: '),
    ([rule(set={"gpu_idle_threshold": 0})], 'policy rule "gpu-course": gpu_idle_threshold must be a percent'),
    ([rule(set={"idle_warn_after": "3h"})],
     'policy rule "gpu-course": idle_warn_after must not exceed idle_reclaim_after'),
    ([rule(set={"exempt_users": [3]})], 'policy rule "gpu-course": exempt_users: must be a list of strings'),
    ([rule(set={"pressure_only": "yes"})], 'policy rule "gpu-course": pressure_only: must be true or false'),
    ([rule(set={"stale_after": "10m"})], 'policy rule "gpu-course": "stale_after" cannot be set by a rule'),
    ([rule(set={"max_keepalive": "1d"})], 'policy rule "gpu-course": "max_keepalive" cannot be set by a rule'),
    ([rule(set=["idle_warn_after"])], 'policy rule "gpu-course": set must be a mapping'),
    ([rule(sets={})], 'policy rule "gpu-course": unknown key "sets"'),
    ([rule(), rule()], 'policy rule "gpu-course": a second rule of that name (rule 2)'),
    ([rule(), rule(name="")], "policy rule 2: needs a name"),
    ([{"match": {}}], "policy rule 1: needs a name"),
    (["gpu-course"], "policy rule 1: must be a mapping"),
    ({"name": "gpu-course"}, "policy rules must be a list of rules"),
])
def test_each_bad_rule_is_an_error_naming_it(data, message):
    with pytest.raises(ConfigError) as e:
        load_rules(data, BASE)
    assert message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_a_rule_is_checked_against_the_base_it_overrides():
    # fine over the defaults (warn 60 m), not over a base that reclaims at 30 m
    data = [rule(set={"idle_warn_after": "45m"})]
    load_rules(data, BASE)
    with pytest.raises(ConfigError, match='policy rule "gpu-course": idle_warn_after must not exceed'):
        load_rules(data, PolicyConfig(idle_warn_after=dt.timedelta(minutes=20),
                                      idle_reclaim_after=dt.timedelta(minutes=30)))
