"""The values files under helm-values/ are valid for the z2jh chart users install them into,
and render to the JupyterHub configuration the docs describe."""

from __future__ import annotations

import shlex

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version
from traitlets.config import Config

from jupyterhub_gpu_reclaim.config import GpuReclaim
from jupyterhub_gpu_reclaim.web import HUB_TEMPLATES

from .z2jh_chart import BASE, HELM_VALUES, Z2JH, apply_chart, chart_values, load, merge

pytestmark = pytest.mark.skipif(not Z2JH.exists(), reason="../shared/z2jh is not beside the clone")

NOT_VALUES = {"rbac.yaml"}   # Kubernetes manifests, applied with kubectl
VARIANTS = sorted(p for p in HELM_VALUES.glob("*.yaml") if p.name not in NOT_VALUES and p != BASE)
SERVICE_SCOPES = {"list:users", "read:users:activity", "read:servers", "delete:servers",
                  "read:users:groups", "tokens"}


@pytest.fixture(scope="module")
def schema():
    return yaml.safe_load((Z2JH / "values.schema.yaml").read_text())


def render(*files, extra=None) -> Config:
    c = Config()
    apply_chart(c, chart_values(*files, extra=extra), {"hub.services.gpu-reclaim.apiToken": "t0ken"})
    return c


def service_args(c: Config) -> list[str]:
    (service,) = [s for s in c.JupyterHub.services if s["name"] == "gpu-reclaim"]
    assert service["command"][:3] == ["python3", "-m", "jupyterhub_gpu_reclaim"]
    return service["command"][3:]


def parsed(args: list[str]) -> GpuReclaim:
    app = GpuReclaim()
    app.parse_command_line(args)
    return app


def test_variants_exist():
    names = {p.name for p in VARIANTS}
    assert {"dry-run.yaml", "dcgm-direct.yaml", "pressure-only.yaml", "princeton-like.yaml",
            "yale-like.yaml", "postgresql.yaml", "jupyterhub5-user-role.yaml"} <= names


@pytest.mark.parametrize("variant", [None, *VARIANTS], ids=lambda p: p.name if p else "gpu-reclaim.yaml")
def test_values_validate_against_chart_schema(schema, variant):
    files = [BASE] + ([variant] if variant else [])
    values = chart_values(*files)
    jsonschema.validate(values, schema)


def test_merge_is_helms():
    assert merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "d": None}) == {"a": {"b": 1, "c": [3]}}


def test_base_renders_the_documented_service_and_role():
    c = render(BASE)
    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["gpu-reclaim"]          # cull.enabled: false, no idle-culler
    (service,) = c.JupyterHub.services
    assert service["url"] == "http://hub:10101" and service["api_token"] == "t0ken"
    app = parsed(service_args(c))
    assert (app.timeout, app.cull_every, app.concurrency, app.dry_run) == (3600, 600, 10, False)
    assert app.bind_url == "http://0.0.0.0:10101"
    assert app.store_url == "sqlite:////srv/jupyterhub/gpu_reclaim.sqlite"
    assert app.prometheus_url and not app.dcgm_exporter_urls
    (role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "gpu-reclaim"]
    assert set(role["scopes"]) == SERVICE_SCOPES and role["services"] == ["gpu-reclaim"]
    assert c.JupyterHub.spawner_class == "jupyterhub_gpu_reclaim.spawner.GPUReclaimSpawner"
    assert c.JupyterHub.extra_user_scopes == ["access:services!service=gpu-reclaim"]
    # what the web pages need (docs/api.md): admin scope, OAuth without confirmation, hub templates
    assert "custom:gpu-reclaim:admin" in c.JupyterHub.custom_scopes
    assert service["oauth_client_allowed_scopes"] == ["custom:gpu-reclaim:admin"] and service["oauth_no_confirm"]
    assert c.JupyterHub.template_paths == [HUB_TEMPLATES]
    gpu = [p for p in c.KubeSpawner.profile_list if "nvidia.com/gpu" in
           p.get("kubespawner_override", {}).get("extra_resource_limits", {})]
    assert len(gpu) == 2


def test_idle_culler_options_keep_the_charts_defaults():
    # the chart passes these to jupyterhub-idle-culler (cull.* defaults); we pass the same
    cull = load(Z2JH / "values.yaml")["cull"]
    app = parsed(service_args(render(BASE)))
    assert app.timeout == cull["timeout"] and app.cull_every == cull["every"]
    assert app.concurrency == cull["concurrency"] and app.cull_users == cull["users"]
    assert app.cull_admin_users == cull["adminUsers"] and app.max_age == cull["maxAge"]
    assert app.remove_named_servers == cull["removeNamedServers"]


def test_service_port_is_exposed_to_the_proxy():
    values = chart_values(BASE)
    port = int(values["hub"]["services"]["gpu-reclaim"]["url"].rsplit(":", 1)[1])
    assert {"name": "gpu-reclaim", "port": port, "targetPort": port} in values["hub"]["service"]["extraPorts"]
    rules = values["hub"]["networkPolicy"]["ingress"]
    assert any({"port": port} in rule["ports"] for rule in rules)
    assert parsed(service_args(render(BASE))).bind_url.endswith(f":{port}")


@pytest.mark.parametrize("variant, expect", [
    ("dry-run.yaml", {"dry_run": True, "admin_recipients": ["admin"]}),
    ("dcgm-direct.yaml", {"prometheus_url": "", "dcgm_exporter_urls": ["http://dcgm-exporter.gpu-operator.svc:9400/metrics"]}),
    ("pressure-only.yaml", {"pressure_only": True, "dry_run": False}),
    ("princeton-like.yaml", {"never_used_reclaim_after": 7200, "idle_reclaim_after": 7200, "idle_warn_after": 3600,
                             "warning_lead": 3600, "gpu_idle_threshold": 1}),
    ("yale-like.yaml", {"never_used_warn_after": 1800, "never_used_reclaim_after": 3600,
                        "idle_warn_after": 3600, "idle_reclaim_after": 7200}),
    ("postgresql.yaml", {"store_url": "postgresql://jupyterhub@postgres.jhub.svc:5432/gpu_reclaim"}),
])
def test_variant_changes_only_what_it_says(variant, expect):
    app = parsed(service_args(render(BASE, HELM_VALUES / variant)))
    for name, value in expect.items():
        assert getattr(app, name) == value, (name, shlex.join(service_args(render(BASE, HELM_VALUES / variant))))


def test_jupyterhub5_user_role_override():
    c = render(BASE, HELM_VALUES / "jupyterhub5-user-role.yaml")
    assert c.JupyterHub.extra_user_scopes == []
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert user["scopes"] == ["self", "access:services!service=gpu-reclaim"]


@pytest.mark.parametrize("path", [BASE, *VARIANTS], ids=lambda p: p.name)
def test_no_null_reaches_the_hubs_traitlets(path):
    """Helm deletes a key set to null only where the chart's defaults have it; under
    hub.config the null stays and reaches the trait as None (JupyterHub 6.1 exited on the
    old jupyterhub5-user-role.yaml's `extra_user_scopes: null`)."""
    config = (load(path).get("hub") or {}).get("config") or {}
    nulls = [f"hub.config.{name}.{key}" for name, section in config.items()
             for key, value in (section or {}).items() if value is None]
    assert not nulls


def test_extra_config_forwards_the_kubernetes_environment(monkeypatch):
    for name in ("KUBECONFIG", "PGPASSWORD", "MYSQL_PWD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("POD_NAMESPACE", "jhub")
    (service,) = render(BASE).JupyterHub.services
    assert service["environment"] == {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
                                      "POD_NAMESPACE": "jhub"}


def test_rbac_manifest_is_valid():
    docs = list(yaml.safe_load_all((HELM_VALUES / "rbac.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]


def test_the_hubs_admins_get_the_reclaim_admin_scope():
    # admin rights on the reclaim pages come from the custom scope only (docs/security.md):
    # the users of Authenticator.admin_users join the gpu-reclaim-admins role with those listed
    c = render(BASE, extra={"hub": {"config": {"Authenticator": {"admin_users": ["root", "ops"]}},
                                    "loadRoles": {"gpu-reclaim-admins": {"users": ["ops", "gpu-lead"]}}}})
    (role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "gpu-reclaim-admins"]
    assert role["users"] == ["gpu-lead", "ops", "root"] and role["scopes"] == ["custom:gpu-reclaim:admin"]
    (role,) = [r for r in render(BASE).JupyterHub.load_roles if r["name"] == "gpu-reclaim-admins"]
    assert role["users"] == []
