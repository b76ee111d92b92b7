"""The z2jh release on the simulated cluster, RBAC and NetworkPolicies enforced: the real
chart rendered with helm-values/gpu-reclaim.yaml (and each variant), applied with
helm-values/rbac.yaml; the hub's pod runs the chart's own jupyterhub_config.py on the
rendered values, the proxy's configurable-http-proxy (jupyterhub_gpu_reclaim.z2jh_release).

The base release runs the whole story through proxy-public, as a user and the admin see
it: alice logs in (and into the service's pages, through the proxy to the hub's port
10101), starts a GPU server from the spawn page, the service warns her and reclaims the
never-used GPU; every Kubernetes call of the hub's ServiceAccount (the spawner, the
service) is one the chart's Role and rbac.yaml allow. Each variant is installed afresh and
must load in the hub and run the service with the settings it says. And the checks bite:
without `patch` in rbac.yaml's Role, or without gpu-reclaim.yaml's 10101 ingress rule,
the same checks fail."""

from __future__ import annotations

import ast
import asyncio
import copy
import html
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu_reclaim import z2jh_release
from jupyterhub_gpu_reclaim.config import GpuReclaim
from jupyterhub_gpu_reclaim.z2jh_release import BASE, HELM_VALUES, NAMESPACE

from ..hubapi import HubAPI
from ..service.common import until
from ..web.common import PREFIX, Client
from .conftest import ADMINS, PASSWORD, POSTGRES_BIN, POSTGRES_IMAGE, new_secret, sim_values

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

VARIANTS = sorted(p.name for p in HELM_VALUES.glob("*.yaml") if p not in (BASE, z2jh_release.RBAC))
HUB_SA = f"system:serviceaccount:{NAMESPACE}:hub"
# the base release's story in seconds instead of hours
TIMINGS = {"cull-every": 2, "never-used-warn-after": "12s", "never-used-reclaim-after": "24s",
           "idle-warn-after": "12s", "idle-reclaim-after": "24s", "warning-lead": "8s"}


# --- installing -------------------------------------------------------------------------------


def install(sim, *variants: str, extra: dict | None = None, objects: list[dict] | None = None,
            rbac: list[dict] | None = None) -> z2jh_release.Release:
    """A fresh release in namespace jhub: gpu-reclaim.yaml, `variants`, the place's values
    (and `extra`), with `objects` (e.g. a database) applied first."""
    kubeconfig = sim.info["kubeconfig"]
    z2jh_release.kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                         "--timeout=120s", timeout=130)
    z2jh_release.kubectl(kubeconfig, "create", "namespace", NAMESPACE)
    if objects:
        z2jh_release.apply(kubeconfig, objects, "-n", NAMESPACE)
    values = z2jh_release.merge_values_files(sim_values(), extra or {})
    docs = z2jh_release.render(BASE, *(HELM_VALUES / v for v in variants), extra=values)
    return z2jh_release.install(kubeconfig, docs, with_rbac=rbac)


def settings(release: z2jh_release.Release) -> dict:
    """The service's settings, as it logs them when it starts (in the hub container's log)."""
    log = release.hub_log()
    start = log.rfind("jupyterhub-gpu-reclaim settings")
    assert start >= 0, log[-3000:]
    out = {}
    for line in log[start:].splitlines()[1:]:
        m = re.match(r"\s*\[?[IWE]? ?[^\]]*\]?\s+(\w+) = (.*)$", line) or re.match(r"\s+(\w+) = (.*)$", line)
        if not m:
            if out:
                break
            continue
        out[m.group(1)] = ast.literal_eval(m.group(2))
    return out


def metrics(release: z2jh_release.Release) -> str:
    with urllib.request.urlopen(f"{release.url}{PREFIX}metrics", timeout=10) as r:
        return r.read().decode()


async def first_cycle(release: z2jh_release.Release) -> str:
    def ok():
        try:
            text = metrics(release)
        except (urllib.error.URLError, OSError):
            return None
        return text if 'jupyterhub_gpu_reclaim_cycles_total{result="ok"}' in text else None
    return await until(ok, 60, f"a successful cycle of the service; hub log:\n{release.hub_log()[-3000:]}")


def forbidden(sim, user: str = HUB_SA) -> list[str]:
    """The requests of `user` that the API server refused (the simulator logs each 403)."""
    return [line for line in sim.log_path.read_text(errors="replace").splitlines()
            if "forbidden:" in line and line.endswith(f" by {user}")]


# --- as a user ----------------------------------------------------------------------------------


class User(Client):
    """A browser's requests through proxy-public: the hub's login form and spawn page, the
    service's pages (OAuth), and a token of the user's own for the hub's API."""

    async def spawn(self, profile: str) -> None:
        async with self.session.get(f"{self.url}/hub/spawn") as r:
            page = await r.text()
            assert r.status == 200 and f'value="{profile}"' in page, page[-2000:]
        action = html.unescape(re.search(r'id="spawn_form"\s+action="([^"]+)"', page).group(1))  # with its _xsrf
        async with self.session.post(f"{self.url}{action}", data={"profile": profile}) as r:
            assert r.status == 200, await r.text()

    async def token(self, name: str) -> str:
        xsrf = next(c.value for c in self.session.cookie_jar if c.key == "_xsrf")
        async with self.session.post(f"{self.url}/hub/api/users/{name}/tokens", json={"expires_in": 3600},
                                     headers={"X-XSRFToken": xsrf}) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["token"]


async def logged_in(release, name: str) -> User:
    user = User(release.url)
    await user.log_in(name, PASSWORD)
    return user


# --- the base release: the whole story ----------------------------------------------------------


@pytest.fixture(scope="module")
def base(cluster):
    release = install(cluster, extra={"custom": {"gpuReclaim": {"options": TIMINGS}}})
    yield release


async def test_the_hub_runs_the_charts_config_on_the_rendered_values(cluster, base):
    log = base.hub_log()
    # the chart's jupyterhub_config.py read the rendered Secret and ran gpu-reclaim.yaml's extraConfig
    assert "Loading /usr/local/etc/jupyterhub/secret/values.yaml" in log
    assert "Loading extra config: gpu-reclaim" in log
    assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in log
    version = (await asyncio.to_thread(_get_json, f"{base.url}/hub/api/"))["version"]
    python = cluster.info["python"]
    import subprocess
    assert version == subprocess.run([str(python), "-c", "import jupyterhub; print(jupyterhub.__version__)"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    # the service reaches the hub's API in its own pod, as the chart's idle culler does
    await first_cycle(base)
    got = settings(base)
    assert got["url"] == "http://localhost:8081/hub/api"
    assert got["dcgm_exporter_urls"] == [z2jh_release.DCGM_URL] and got["cull_every"] == 2


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


async def test_a_never_used_gpu_is_warned_then_reclaimed(cluster, base):
    """alice, through proxy-public: the login form, the service's pages (the proxy reaches
    the hub pod's 10101 under the NetworkPolicy), the spawn page's 1-GPU profile; the
    service warns and reclaims through the hub; the spawner annotated her pod (patch,
    rbac.yaml) and placed it by image locality (the ClusterRole); nothing was refused."""
    await first_cycle(base)
    alice = await logged_in(base, "alice")
    try:
        status, page, _ = await alice.call("GET", "")
        assert status == 200 and "alice" in page
        await alice.spawn("gpu-1")
        api = HubAPI(base.url, await alice.token("alice"))
        try:
            server = await api.wait_ready("alice", timeout=120)
            pod = json.loads(base.kubectl("get", "pod", "jupyter-alice", "-o", "json"))
            assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
            assert pod["spec"]["nodeName"].startswith("gpu-")
            timings = json.loads(pod["metadata"]["annotations"]["jupyterhub-gpu-reclaim/spawn-timings"])
            assert timings, pod["metadata"]["annotations"]
            # her own view of the session: warned, with the rule and when it will be reclaimed
            async def warned():
                _, body = await alice.json("GET", "api/sessions")
                return next((s for s in body.get("sessions", []) if s["state"] == "warned"), None)
            session = await until(warned, 60, "alice's session warned")
            assert session["rule"] == "gpu-never-used" and session["reclaim_at"]
            # reclaimed through the hub: her server and pod are gone, the reclaim is hers to see
            await until(lambda: _gone(api), 60, "alice's server reclaimed")
            await until(lambda: not base.kubectl("get", "pods", "-l", "hub.jupyter.org/username=alice",
                                                 "-o", "name").strip(), 60, "alice's pod deleted")
            _, body = await alice.json("GET", "api/sessions")
            assert [r["session"] for r in body["reclaims"]] == ["alice/"]
            assert server["started"]
        finally:
            await api.close()
    finally:
        await alice.close()
    text = metrics(base)
    assert 'jupyterhub_gpu_reclaim_reclaims_total{reason="gpu-never-used"} 1.0' in text, text
    assert not forbidden(cluster), forbidden(cluster)
    log = base.hub_log()
    assert "image locality off" not in log and "could not annotate" not in log


async def _gone(api: HubAPI) -> bool:
    return await api.server("alice") is None


async def test_the_admin_sees_the_reclaim_on_the_admin_page(base):
    admin = await logged_in(base, ADMINS[0])
    try:
        status, body = await admin.json("GET", "api/admin/history?since=1h")
        assert status == 200, body
        assert any(r.get("session") == "alice/" for r in body.get("items", body.get("reclaims", []))), body
    finally:
        await admin.close()


# --- every variant -------------------------------------------------------------------------------


def _variant_options(name: str) -> dict:
    return ((yaml.safe_load((HELM_VALUES / name).read_text()).get("custom") or {}).get("gpuReclaim") or {}
            ).get("options") or {}


def _expected(options: dict) -> dict:
    """The service's settings the variant's options give (parsed as the service parses its
    command line; a null drops the option, leaving the default)."""
    app, defaults = GpuReclaim(), GpuReclaim()
    app.parse_command_line([f"--{k}={v}" for k, v in options.items() if v is not None
                            for v in (v if isinstance(v, list) else [v])])
    out = {}
    for key, value in options.items():
        name = key.replace("-", "_")
        out[name] = getattr(defaults if value is None else app, name)
    return {k: (v.total_seconds() if hasattr(v, "total_seconds") else v) for k, v in out.items()}


def postgres(password: str) -> list[dict]:
    """A PostgreSQL server at postgres.jhub.svc:5432 (postgresql.yaml's address), Debian's
    PostgreSQL 15 standing in for the postgres image: user jupyterhub with `password`
    (scram-sha-256 from anywhere), databases jupyterhub and gpu_reclaim (as the variant's
    comment tells the admin to create)."""
    script = f"""set -e
export PGDATA=/var/lib/postgresql/data
printf '%s' "$POSTGRES_PASSWORD" > /tmp/pw
initdb -U jupyterhub --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256 >/dev/null
echo 'host all all 0.0.0.0/0 scram-sha-256' >> $PGDATA/pg_hba.conf
printf 'CREATE DATABASE jupyterhub;\\nCREATE DATABASE gpu_reclaim;\\n' | postgres --single -D $PGDATA postgres >/dev/null
exec postgres -D $PGDATA -c listen_addresses='*' -k /tmp"""
    labels = {"app": "postgres"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "postgres"},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "containers": [{"name": "postgres", "image": POSTGRES_IMAGE, "command": ["sh", "-c", script],
                             "env": [{"name": "POSTGRES_PASSWORD", "value": password}],
                             "ports": [{"containerPort": 5432, "name": "postgres"}],
                             "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}]}],
             "volumes": [{"name": "data", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "postgres"},
         "spec": {"selector": labels, "ports": [{"port": 5432, "targetPort": "postgres"}]}},
    ]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_each_variant_loads_in_the_hub_and_runs_the_service_as_it_says(cluster, variant):
    extra, objects = None, None
    if variant == "postgresql.yaml":
        if not POSTGRES_BIN.is_dir():
            pytest.fail(f"{POSTGRES_BIN} is missing: scripts/setup.sh installs Debian's postgresql")
        password = new_secret()
        extra, objects = {"hub": {"db": {"password": password}}}, postgres(password)
    release = install(cluster, variant, extra=extra, objects=objects)
    text = await first_cycle(release)
    got = settings(release)
    for name, value in _expected(_variant_options(variant)).items():
        assert got[name] == value, (variant, name, got[name])
    assert ("jupyterhub_gpu_reclaim_dry_run 1.0" in text) == got["dry_run"]
    log = release.hub_log()
    if variant == "postgresql.yaml":
        # the hub's database and the service's records in the server, its password passed on
        assert "postgresql://jupyterhub@postgres.jhub.svc:5432/jupyterhub" in log
        assert password not in log
    if variant == "jupyterhub5-user-role.yaml":
        # users reach the service's pages by the "user" role
        alice = await logged_in(release, "alice")  # log_in opens the service's page (OAuth)
        try:
            api = HubAPI(release.url, await alice.token("alice"))
            me = await api.request("GET", "/user")
            await api.close()
            assert "access:services!service=gpu-reclaim" in me["scopes"]
        finally:
            await alice.close()
    assert not forbidden(cluster), forbidden(cluster)


# --- the checks bite --------------------------------------------------------------------------


def _without_patch() -> list[dict]:
    objects = copy.deepcopy(z2jh_release.rbac())
    role = z2jh_release.find(objects, "Role", "jupyterhub-gpu-reclaim")
    role["rules"] = [r for r in role["rules"] if "patch" not in r["verbs"]] or [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    return objects


async def test_without_patch_in_rbac_yaml_the_spawn_timings_are_refused(cluster):
    release = install(cluster, rbac=_without_patch())
    alice = await logged_in(release, "alice")
    try:
        await alice.spawn("cpu")
        api = HubAPI(release.url, await alice.token("alice"))
        try:
            await api.wait_ready("alice", timeout=120)
            pod = json.loads(release.kubectl("get", "pod", "jupyter-alice", "-o", "json"))
            assert "jupyterhub-gpu-reclaim/spawn-timings" not in pod["metadata"].get("annotations", {})
            refused = await until(lambda: forbidden(cluster), 30, "the refused patch in the simulator's log")
            assert any("PATCH /api/v1/namespaces/jhub/pods/jupyter-alice" in line for line in refused), refused
            assert "could not annotate jupyter-alice" in release.hub_log()
            await api.stop("alice")
        finally:
            await api.close()
    finally:
        await alice.close()


async def test_without_the_10101_rule_the_proxy_cannot_reach_the_service(cluster):
    values = yaml.safe_load(BASE.read_text())
    rules = values["hub"]["networkPolicy"]["ingress"]
    assert [r["ports"] for r in rules] == [[{"port": 10101}]]
    release = install(cluster, extra={"hub": {"networkPolicy": {"ingress": []}}})
    # the hub works; its service's pages do not: the proxy's connection to hub:10101 is refused
    assert _status(f"{release.url}/hub/login") == 200
    assert _status(f"{release.url}{PREFIX}metrics") in (502, 503)
    alice = User(release.url)
    try:
        with pytest.raises(AssertionError):
            await alice.log_in("alice", PASSWORD)
    finally:
        await alice.close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
