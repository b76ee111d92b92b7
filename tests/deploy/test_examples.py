"""examples/: policy files backtest as docs/policy-examples.md says, the Grafana dashboard and
the Prometheus rules use only metrics the code exports, the plain-Kubernetes config and the
hub image recipe agree with the values files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

from gpu_reclaim_sim.paths import REPO, SHARED
from gpu_reclaim_sim.z2jh.release import CHART, chart_missing
from jupyterhub_gpu_reclaim.replay.backtest import backtest, load_policy_config
from jupyterhub_gpu_reclaim.application import GpuReclaim

from ..support.prometheus import without_kubernetes_sd
from ..support.docs import table_rows
from ..support.chart_values import SERVICE_SCOPES, expected_settings, variant_options

EXAMPLES = REPO / "examples"
TRACE = EXAMPLES / "traces" / "example.jsonl"  # the sample trace of ../shared/traces
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
METRIC = re.compile(r"\bjupyterhub_gpu_reclaim[a-z0-9_:]*")


def exported_families() -> dict[str, str]:
    """{name: type} of the metrics the service (service/metrics.py) and the spawner (spawner/core.py)
    export, named as in their /metrics (counters with _total)."""
    from prometheus_client import REGISTRY

    from jupyterhub_gpu_reclaim.service.metrics import Metrics
    from jupyterhub_gpu_reclaim.spawner import core  # noqa: F401 (registers the spawner's)

    families = {}
    for registry in (Metrics().registry, REGISTRY):
        for family in registry.collect():
            if family.name.startswith("jupyterhub_gpu_reclaim"):
                name = family.name + "_total" if family.type == "counter" else family.name
                families[name] = family.type
    return families


def exported_metrics() -> set[str]:
    """Every series name a query may use (histograms with _bucket/_sum/_count)."""
    names = set()
    for name, kind in exported_families().items():
        names.add(name)
        if kind == "histogram":
            names |= {name + s for s in ("_bucket", "_sum", "_count")}
    return names


def recorded_names() -> set[str]:
    rules = yaml.safe_load((EXAMPLES / "prometheus" / "recording-rules.yaml").read_text())
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


# ------------------------------------------------------------------ policies


@pytest.mark.skipif(not TRACE.exists(), reason="../shared/traces is not beside the clone")
def test_policy_examples_backtest_as_documented():
    rows = {row[0]: row[1:] for row in table_rows(REPO / "docs" / "policy-examples.md", "policy")}
    files = sorted((EXAMPLES / "policies").glob("*.yaml"))
    assert {f"`{f.name}`" for f in files} | {"defaults (no file)"} == set(rows)
    for name, path in [("defaults (no file)", None), *((f"`{f.name}`", f) for f in files)]:
        report = backtest(TRACE, config=load_policy_config(path) if path else None)
        s, score = report["summary"], report["score"]
        computed = [str(s["warnings"]), str(s["reclaims"]), str(score["false_reclaims"]),
                    f"{s['gpu_hours_freed']:.1f}",
                    f"{score['reclaimable_gpu_hours_recovered']:.1f} of {score['reclaimable_gpu_hours']:.1f} "
                    f"({round(score['recovered_share'] * 100)} %)"]
        assert rows[name] == computed, name


def test_policy_examples_match_the_helm_variants():
    # the same policy as a backtest file and as the service's options in helm-values/
    for name in ("princeton-like.yaml", "yale-like.yaml", "pressure-only.yaml"):
        policy = load_policy_config(EXAMPLES / "policies" / name)
        options = variant_options(name)
        assert options, name
        for field, want in expected_settings(options).items():
            got = getattr(policy, field)
            got = got.total_seconds() if hasattr(got, "total_seconds") else got
            assert got == want, (name, field)


# ------------------------------------------------------------------ metrics


def test_grafana_dashboard_uses_exported_metrics():
    dashboard = json.loads((EXAMPLES / "grafana" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    used = {m for e in exprs for m in METRIC.findall(e)}
    unknown = used - exported_metrics() - recorded_names()
    assert not unknown, unknown
    # reclaims, idle GPU-hours, queue wait, spawn phases
    for needed in ("jupyterhub_gpu_reclaim_reclaims_total", "jupyterhub_gpu_reclaim_idle_gpu_hours",
                   "jupyterhub_gpu_reclaim_spawn_phase_duration_seconds_bucket",
                   "jupyterhub_gpu_reclaim_pending_gpus"):
        assert needed in used
    assert 'phase="schedule"' in " ".join(exprs)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_recording_rules_parse_and_use_exported_metrics():
    path = EXAMPLES / "prometheus" / "recording-rules.yaml"
    if PROMTOOL:
        result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    rules = yaml.safe_load(path.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert ("record" in rule) != ("alert" in rule) and rule["expr"]
            unknown = set(METRIC.findall(rule["expr"])) - exported_metrics() - recorded_names()
            assert not unknown, (rule, unknown)


def test_alert_fires_when_no_cycle_succeeded_for_three_cycle_intervals():
    """`promtool test rules` (Debian's prometheus package, installed by scripts/setup.sh)
    evaluates the alerts on series as the service exports them: no alert while cycles
    succeed, GpuReclaimNoSuccessfulCycle past 3 x the exported cycle interval,
    GpuReclaimAbsent when the service's metrics are gone."""
    assert PROMTOOL, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    tests = Path(__file__).with_name("prometheus-alerts-test.yaml")
    result = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    used = set(METRIC.findall(tests.read_text()))
    assert used <= exported_metrics() and "jupyterhub_gpu_reclaim_cycle_interval_seconds" in used


def test_prometheus_scrape_config():
    config = yaml.safe_load((EXAMPLES / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["recording-rules.yaml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["dcgm-exporter"]["honor_labels"] is False          # → exported_pod, as documented
    assert jobs["jupyterhub-gpu-reclaim"]["metrics_path"] == "/services/gpu-reclaim/metrics"
    # what the dcgm-exporter job scrapes: tests/signals/test_exporter_readings.py


def test_prometheus_config_passes_promtool(tmp_path):
    """`promtool check config` on examples/prometheus (its rules file too), its Kubernetes
    discovery replaced by a file (Debian's Prometheus is built without it)."""
    assert PROMTOOL, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    config = yaml.safe_load((EXAMPLES / "prometheus" / "prometheus.yml").read_text())
    (tmp_path / "targets.json").write_text("[]")
    shutil.copy(EXAMPLES / "prometheus" / "recording-rules.yaml", tmp_path)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(without_kubernetes_sd(config, tmp_path / "targets.json")))
    result = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_metrics_reference_lists_every_metric():
    text = (REPO / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(jupyterhub_gpu_reclaim_[a-z_]+)", text))
    assert documented == set(exported_families())


# ------------------------------------------------------------------ install recipes


def test_plain_kubernetes_config_is_the_documented_one(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "jhub")
    c = Config()
    exec(compile((EXAMPLES / "kubernetes" / "jupyterhub_config.py").read_text(), "jupyterhub_config.py", "exec"),
         {"get_config": lambda: c})
    (service,) = c.JupyterHub.services
    app = GpuReclaim()
    app.parse_command_line(service["command"][3:])
    assert app.dry_run and app.bind_url.endswith(":10101") and service["url"].endswith(":10101")
    (role,) = c.JupyterHub.load_roles
    assert set(role["scopes"]) == SERVICE_SCOPES
    assert c.KubeSpawner.namespace == "jhub"
    assert c.JupyterHub.spawner_class == "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"


@pytest.mark.skipif(chart_missing() is not None, reason=chart_missing() or "")
def test_hub_image_builds_on_the_charts_hub_image():
    dockerfile = (EXAMPLES / "hub-image" / "Dockerfile").read_text()
    chart_image = yaml.safe_load((CHART / "values.yaml").read_text())["hub"]["image"]["name"]
    assert f"ARG HUB_IMAGE={chart_image}\n" in dockerfile
    assert "FROM ${HUB_IMAGE}:${HUB_IMAGE_TAG}" in dockerfile
    assert re.search(r"^USER 1000$", dockerfile, re.M)   # the chart's runAsUser


def test_hub_image_context_leaves_out_history_environments_and_caches():
    """The recipe builds from the repository's root (its comment): .dockerignore there keeps
    .git, local virtualenvs, node_modules and caches out of the image's layer."""
    patterns = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert "docker build -f examples/hub-image/Dockerfile" in (EXAMPLES / "hub-image" / "Dockerfile").read_text()
    assert {".git", ".venv*", "**/node_modules", "**/__pycache__", ".pytest_cache", ".hypothesis",
            "*.egg-info"} <= patterns


@pytest.mark.skipif(not (SHARED / "traces" / "example.jsonl").exists(),
                    reason="../shared/traces/example.jsonl is not beside the clone")
def test_the_sample_trace_is_the_formats():
    """examples/traces/example.jsonl is a copy of the shared sample trace, for users who
    have only the repository."""
    shared = SHARED / "traces" / "example.jsonl"
    assert TRACE.read_text() == shared.read_text()
