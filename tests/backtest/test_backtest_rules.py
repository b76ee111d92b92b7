"""The backtest under policy rules: a policy file's ``rules`` (the service's --policy-rules
list) give each session its rule's settings; the report names the rule of each warning and
reclaim, and lists the rules. Without rules the report is as before (no new key)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from jupyterhub_gpu_reclaim.replay.backtest import BACKTEST_POLICY, backtest, load_policy_config
from jupyterhub_gpu_reclaim.replay.backtest_report import format_report
from jupyterhub_gpu_reclaim.errors import ConfigError
from jupyterhub_gpu_reclaim.policy.rules import PolicyRules

from ..support.clock import at
from ..support.traces import Trace, cli, idle_open_tab, ts

POLICY = """\
warning_lead: 10m
rules:
  - name: gpu-short
    match: {profiles: [gpu-short]}
    set: {never_used_warn_after: 10m, never_used_reclaim_after: 25m}
  - name: a100-course
    match: {gpu_types: [NVIDIA-A100-SXM4-80GB], groups: [course-101]}
    set: {never_used_warn_after: 20m, never_used_reclaim_after: 40m}
"""


def trace(tmp_path):
    return (Trace(hours=4)
            .session("alice/", profile="gpu-short", sample=idle_open_tab())
            .session("bob/", profile="gpu-long", sample=idle_open_tab())
            .session("carol/", profile="gpu-long", groups=["course-101"], gpu_type="NVIDIA-A100-SXM4-80GB",
                     sample=idle_open_tab())
            .write(tmp_path / "t.jsonl"))


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def test_rules_in_the_policy_file_time_each_session_and_are_named(tmp_path, policy):
    rules = load_policy_config(policy)
    assert isinstance(rules, PolicyRules) and rules.names == ["gpu-short", "a100-course"]
    assert rules.base == dataclasses.replace(BACKTEST_POLICY, warning_lead=dt.timedelta(minutes=10))
    report = backtest(trace(tmp_path), config=rules)
    assert report["policy_rules"] == ["gpu-short", "a100-course"]
    assert report["policy"]["warning_lead"] == 600  # the base policy, as before
    warned = {w["session"]: (w["t"], w["policy_rule"]) for w in report["warnings"]}
    assert warned == {"alice/": (ts(at(10)), "gpu-short"), "carol/": (ts(at(20)), "a100-course"),
                      "bob/": (ts(at(60)), None)}  # bob: no rule matches, the defaults
    reclaimed = {r["session"]: (r["t"], r["policy_rule"]) for r in report["reclaims"]}
    assert reclaimed == {"alice/": (ts(at(25)), "gpu-short"), "carol/": (ts(at(40)), "a100-course"),
                         "bob/": (ts(at(120)), None)}
    assert "[policy rule gpu-short]" in format_report(report)


def test_without_rules_the_report_has_no_rule_keys(tmp_path):
    report = backtest(trace(tmp_path))
    assert "policy_rules" not in report
    assert all("policy_rule" not in r for r in report["reclaims"] + report["warnings"])


def test_a_bad_rule_in_the_policy_file_names_the_file_and_the_rule(tmp_path, policy):
    policy.write_text(POLICY.replace("never_used_warn_after: 20m", "never_used_warn_aftr: 20m"))
    with pytest.raises(ConfigError) as e:
        load_policy_config(policy)
    assert str(e.value) == f'{policy}: policy rule "a100-course": unknown setting "never_used_warn_aftr"'


def test_cli_json_keeps_its_shape_and_adds_the_rules(tmp_path, policy):
    path = trace(tmp_path)
    plain = json.loads(cli("--trace", str(path), "--json").stdout)
    proc = cli("--trace", str(path), "--config", str(policy), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(plain) <= set(report) and set(report) - set(plain) == {"policy_rules"}
    for key in ("reclaims", "warnings"):
        assert all(set(r) - set(plain[key][0]) == {"policy_rule"} for r in report[key])
    assert report["summary"].keys() == plain["summary"].keys()
    policy.write_text(POLICY.replace("profiles: [gpu-short]", "profile: gpu-short"))
    proc = cli("--trace", str(path), "--config", str(policy), "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert 'policy rule "gpu-short": unknown criterion "profile"' in proc.stderr
    assert "Traceback" not in proc.stderr
