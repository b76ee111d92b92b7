"""The values files under helm-values/ render with the z2jh chart users install them into
(gpu_reclaim_sim.z2jh.release: the chart itself, rendered by Helm's Go SDK with the
chart's schema enforced), and what Helm makes of them is what the files mean. What the hub
and the service then do with them, on the simulated cluster: tests/release."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.z2jh.release import BASE, RBAC

from ..support.chart_values import VARIANTS

needs_chart = pytest.mark.skipif(z2jh.missing() is not None, reason=z2jh.missing() or "")


def test_variants_exist():
    names = {p.name for p in VARIANTS}
    assert {"dry-run.yaml", "dcgm-direct.yaml", "pressure-only.yaml", "princeton-like.yaml",
            "yale-like.yaml", "postgresql.yaml", "jupyterhub5-user-role.yaml"} <= names


def hub_config(*files, extra=None) -> dict:
    """hub.config as the hub reads it (the rendered hub Secret's values.yaml)."""
    return z2jh.hub_values(z2jh.render(*files, extra=extra))["hub"]["config"]


@needs_chart
@pytest.mark.parametrize("variant", [None, *VARIANTS], ids=lambda p: p.name if p else "gpu-reclaim.yaml")
def test_values_render_under_the_charts_schema(variant):
    docs = z2jh.render(BASE, *([variant] if variant else []))
    assert z2jh.find(docs, "Deployment", "hub")["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example.edu/jupyterhub/k8s-hub-gpu-reclaim:0.1.0"


@needs_chart
def test_the_charts_schema_refuses_what_it_does_not_know():
    import helm_python

    with pytest.raises(helm_python.HelmValuesError, match="gpuReclam"):
        z2jh.render(BASE, extra={"hub": {"gpuReclam": {}}})


@needs_chart
@pytest.mark.parametrize("variant", [None, *VARIANTS], ids=lambda p: p.name if p else "gpu-reclaim.yaml")
def test_no_null_reaches_the_hubs_traitlets(variant):
    """Helm drops a null only where the chart's defaults have the key; under hub.config it
    stays and reaches the trait as None (JupyterHub 6.1 exited on the old
    jupyterhub5-user-role.yaml's `extra_user_scopes: null`)."""
    config = hub_config(BASE, *([variant] if variant else []))
    nulls = [f"hub.config.{name}.{key}" for name, section in config.items()
             for key, value in (section or {}).items() if value is None]
    assert not nulls


@needs_chart
def test_helm_keeps_a_null_the_charts_defaults_do_not_have():
    """What the test above guards against, as Helm really does it: a null under hub.config
    reaches the hub; one for a key of the chart's defaults removes the key."""
    values = z2jh.hub_values(z2jh.render(BASE, extra={"hub": {"config": {"JupyterHub": {"extra_user_scopes": None}}},
                                                       "cull": {"timeout": None}}))
    assert values["hub"]["config"]["JupyterHub"]["extra_user_scopes"] is None
    assert "timeout" not in values["cull"] and "every" in values["cull"]


def test_rbac_manifest_is_valid():
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
