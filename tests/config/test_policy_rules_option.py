"""--policy-rules: the service's rules file, checked at start like every other option."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from jupyterhub_gpu_reclaim import cli
from jupyterhub_gpu_reclaim.launcher import run_app
from jupyterhub_gpu_reclaim.policy.observations import Decision, Session, SessionView
from jupyterhub_gpu_reclaim.policy.step import step

from ..support.clock import START

TOKEN = "s3cr3t-token-value"
URL = "http://localhost:8081/hub/api"
RULES = """\
# a course's sessions get less idle time
- name: gpu-course
  match: {profiles: [gpu-course], server: default}
  set: {idle_warn_after: 20m, idle_reclaim_after: 40m}
- name: staff
  match: {groups: [staff]}
  set: {exempt_users: [ops]}
"""


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    monkeypatch.delenv("JUPYTERHUB_API_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray gpu_reclaim_config.py


def settings_of(argv):
    seen = []

    async def run(settings):
        seen.append(settings)

    assert run_app([f"--url={URL}", *argv], run=run) == 0
    return seen[0]


def run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main([f"--url={URL}", *argv])
    return exc.value.code, capsys.readouterr().err


def test_the_rules_file_gives_the_service_its_rules_over_the_options(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    s = settings_of([f"--policy-rules={path}", "--idle-reclaim-after=3h"])
    assert s.rules.names == ["gpu-course", "staff"] and s.rules.base == s.policy
    course = s.rules.rules[0].config
    assert (course.idle_warn_after, course.idle_reclaim_after) == (dt.timedelta(minutes=20),
                                                                    dt.timedelta(minutes=40))
    assert s.rules.rules[1].config.idle_reclaim_after == dt.timedelta(hours=3)  # the option, not overridden
    # JSON is YAML too; the config file names it as well
    path.write_text(json.dumps([{"name": "x", "set": {"pressure_only": True}}]))
    (tmp_path / "gpu_reclaim_config.py").write_text(f"c.GpuReclaim.policy_rules = {str(path)!r}\n")
    assert settings_of([]).rules.names == ["x"]


def test_a_policy_option_reaches_the_decider_in_one_hop(tmp_path):
    # the PolicyConfig the Application's typed call makes of the options is the very object
    # the decider is handed for a session no rule matches; a matching rule's has its `set`
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    s = settings_of([f"--policy-rules={path}", "--gpu-idle-threshold=7", "--warning-lead=20m",
                     "--never-used-warn-after=40m", "--timeout=900"])
    handed = []

    def decide(view, *, config, **kw):
        handed.append(config)
        return Decision(view.session.id, "keep", "gpu-active", "")

    sessions = [Session(id=f"{u}/", user=u, server="", gpus=1, started=START, profile=p)
                for u, p in (("ann", None), ("bea", "gpu-course"))]
    for session in sessions:
        step(SessionView(session, ()), now=START, pending_gpus=0, policy=s.rules.applied(session), decide=decide)
    base, course = handed
    assert base is s.policy
    assert (base.gpu_idle_threshold, base.warning_lead, base.never_used_warn_after, base.cpu_timeout) == (
        7, dt.timedelta(minutes=20), dt.timedelta(minutes=40), dt.timedelta(seconds=900))
    assert course is s.rules.rules[0].config and course.idle_reclaim_after == dt.timedelta(minutes=40)
    assert course == dataclasses.replace(base, idle_warn_after=dt.timedelta(minutes=20),
                                         idle_reclaim_after=dt.timedelta(minutes=40))


def test_without_a_rules_file_there_are_no_rules():
    s = settings_of([])
    assert s.rules.rules == () and s.rules.base == s.policy


@pytest.mark.parametrize("text, message", [
    (RULES.replace("idle_warn_after", "idle_warn_aftr"), 'policy rule "gpu-course": unknown setting "idle_warn_aftr"'),
    (RULES.replace("40m", "often"), 'policy rule "gpu-course": idle_reclaim_after: '),
    (RULES.replace("groups:", "group:"), 'policy rule "staff": unknown criterion "group"'),
    (RULES.replace("name: staff", "name: gpu-course"), 'policy rule "gpu-course": a second rule of that name'),
    ("- name: [", "not JSON or YAML"),
    ("{rules: []}", "policy rules must be a list of rules"),
])
def test_a_bad_rule_exits_2_with_one_line_naming_it(tmp_path, capsys, text, message):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    code, err = run([f"--policy-rules={path}"], capsys)
    assert code == 2, err
    assert err.startswith(f"jupyterhub-gpu-reclaim: error: --policy-rules {path}: "), err
    assert message in err and "Traceback" not in err


def test_a_rule_is_checked_over_the_options_it_overrides(tmp_path, capsys):
    path = tmp_path / "rules.yaml"
    path.write_text("- name: late-warning\n  set: {idle_warn_after: 20m}\n")
    code, err = run([f"--policy-rules={path}", "--idle-reclaim-after=15m", "--idle-warn-after=10m"], capsys)
    assert code == 2
    assert 'policy rule "late-warning": idle_warn_after must not exceed idle_reclaim_after' in err


def test_a_missing_rules_file_exits_2(tmp_path, capsys):
    code, err = run([f"--policy-rules={tmp_path}/nope.yaml"], capsys)
    assert code == 2 and f"--policy-rules {tmp_path}/nope.yaml: cannot read" in err, err
