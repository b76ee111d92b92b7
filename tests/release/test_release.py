"""The z2jh release on the simulated cluster, RBAC and NetworkPolicies enforced: the real
chart rendered with helm-values/gpu-reclaim.yaml (and each variant), applied with
helm-values/rbac.yaml; the hub's pod runs the chart's own jupyterhub_config.py on the
rendered values, the proxy's configurable-http-proxy (gpu_reclaim_sim.z2jh.release).

The base release runs the whole story through proxy-public, as a user and the admin see
it (`gpu_story`): the service's pages answer (the proxy reaches the hub pod's port 10101),
alice logs in (and into the service's pages), starts a GPU server from the spawn page, the
spawner annotates her pod, the service warns her and reclaims the never-used GPU; every
Kubernetes call of the hub's ServiceAccount (the spawner, the service) is one the chart's
Role and rbac.yaml allow. Each variant is installed afresh and must load in the hub and run
the service with the settings it says, and no others. And the checks bite: without `patch`
in rbac.yaml's Role, or without gpu-reclaim.yaml's 10101 ingress rule, the same story
fails, where it should.

On JupyterHub 5 (make test's --hub-python pass) the base release adds
helm-values/jupyterhub5-user-role.yaml, as docs/install-z2jh.md tells its admins to."""

from __future__ import annotations

import ast
import base64
import html
import json
import re
import secrets
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio
import yaml

from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.z2jh.release import BASE, CHART, HELM_VALUES, NAMESPACE
from jupyterhub_gpu_reclaim.service.hub_stopper import HubStopper
from jupyterhub_gpu_reclaim.config import IDLE_CULLER_OPTIONS, GpuReclaim
from jupyterhub_gpu_reclaim.spawner.core import TIMINGS_ANNOTATION

from ..support import live
from ..support.live import hub_major
from ..support.chart_values import SERVICE_SCOPES, VARIANTS
from ..support.hubapi import HubAPI
from ..support.service_hub import metric, parse_metrics, until
from ..support.web_client import PREFIX, Client
from ..support.release import ADMINS, PASSWORD, POSTGRES_BIN, POSTGRES_IMAGE, sim_values

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HUB_SA = f"system:serviceaccount:{NAMESPACE}:hub"
USER_ROLE = "jupyterhub5-user-role.yaml"
ACCESS = "access:services!service=gpu-reclaim"
# the base release's story in seconds instead of hours
TIMINGS = {"cull-every": 2, "never-used-warn-after": "12s", "never-used-reclaim-after": "24s",
           "idle-warn-after": "12s", "idle-reclaim-after": "24s", "warning-lead": "8s"}
# who else may use the admin page: gpu-reclaim.yaml's role lists them beside the hub's admins
RECLAIM_ADMINS = ["carol"]


# --- installing -------------------------------------------------------------------------------


def install(sim, *variants: str, extra: dict | None = None, objects: list[dict] | None = None,
            rbac: list[dict] | None = None) -> z2jh.Release:
    """A fresh release in namespace jhub: gpu-reclaim.yaml, `variants`, the place's values
    (and `extra`), with `objects` (e.g. a database) applied first. The simulator's log
    from here on is the release's (`forbidden`)."""
    kubeconfig = sim.info["kubeconfig"]
    z2jh.kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                 "--timeout=120s", timeout=130)
    z2jh.kubectl(kubeconfig, "create", "namespace", NAMESPACE)
    sim.info["release_log_from"] = sim.log_path.stat().st_size
    if objects:
        z2jh.apply(kubeconfig, objects, "-n", NAMESPACE)
    values = z2jh.merge_values_files(sim_values(), extra or {})
    docs = z2jh.render(BASE, *(HELM_VALUES / v for v in variants), extra=values)
    return z2jh.install(kubeconfig, docs, with_rbac=rbac)


def forbidden(sim, user: str = HUB_SA) -> list[str]:
    """The requests of `user` that the API server refused since the release was installed
    (the simulator logs each 403)."""
    with open(sim.log_path, errors="replace") as f:
        f.seek(sim.info["release_log_from"])
        return [line for line in f.read().splitlines() if "forbidden:" in line and line.endswith(f" by {user}")]


def settings(release: z2jh.Release) -> dict:
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


def _status(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _metrics(release: z2jh.Release) -> dict:
    status, text = _status(f"{release.url}{PREFIX}metrics")
    return parse_metrics(text) if status == 200 else {}


async def first_cycle(release: z2jh.Release) -> dict:
    """The service's metrics once it has run a successful cycle."""
    def ok():
        values = _metrics(release)
        return values if metric(values, "jupyterhub_gpu_reclaim_cycles_total", result="ok") else None
    return await until(ok, 60, "a successful cycle of the service", interval=1)


async def the_service_answers(release: z2jh.Release) -> None:
    """The service's /metrics through proxy-public, once the service serves it in the hub
    pod and the hub has routed it (before, the hub answers 404): 200, or what the proxy
    answered instead."""
    def routed():
        status, body = _status(f"{release.url}{PREFIX}metrics")
        return None if status == 404 or "serving /metrics on" not in release.hub_log() else (status, body)
    status, body = await until(routed, 60, "the service serving, and routed by the hub", interval=1)
    # the text of the proxy's or the hub's error page
    text = " ".join(re.sub(r"<[^>]*>", " ", re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", body)).split())
    assert status == 200, f"the service's {PREFIX}metrics through proxy-public answered {status}: {text[:300]}"


# --- as a user ----------------------------------------------------------------------------------


class User(Client):
    """A browser's requests through proxy-public: the hub's login form and spawn page, the
    service's pages (OAuth), and a token of the user's own for the hub's API."""

    async def page(self, path: str) -> str:
        async with self.session.get(f"{self.url}/hub/{path}") as r:
            assert r.status == 200, (path, r.status)
            return await r.text()

    async def spawn(self, profile: str) -> None:
        page = await self.page("spawn")
        assert f'value="{profile}"' in page, page[-2000:]
        action = html.unescape(re.search(r'id="spawn_form"\s+action="([^"]+)"', page).group(1))  # with its _xsrf
        async with self.session.post(f"{self.url}{action}", data={"profile": profile}) as r:
            assert r.status == 200, await r.text()

    async def token(self, name: str) -> str:
        xsrf = next(c.value for c in self.session.cookie_jar if c.key == "_xsrf")
        async with self.session.post(f"{self.url}/hub/api/users/{name}/tokens", json={"expires_in": 3600},
                                     headers={"X-XSRFToken": xsrf}) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["token"]

    async def scopes(self, name: str) -> set[str]:
        """The scopes of a token of the user's own (what the hub grants the user)."""
        api = HubAPI(self.url, await self.token(name))
        try:
            return set((await api.request("GET", "/user"))["scopes"])
        finally:
            await api.close()


async def logged_in(release, name: str, *, to_service: bool = True) -> User:
    user = User(release.url)
    try:
        await (user.log_in(name, PASSWORD) if to_service else user.log_in_to_hub(name, PASSWORD))
    except BaseException:
        await user.close()
        raise
    return user


# --- the story ------------------------------------------------------------------------------------


async def gpu_story(sim, release: z2jh.Release) -> None:
    """alice's GPU session on `release`, through proxy-public; an AssertionError names the
    first step that fails. The service's pages answer (the proxy reaches the hub pod's
    10101 under the NetworkPolicy); alice logs in, into the service's pages too; the hub's
    pages carry the reclaim panel; she starts the spawn page's 1-GPU profile; the spawner
    annotates her pod (`patch`, rbac.yaml) and places it by image locality (the
    ClusterRole); the service warns her (her JupyterLab extension sees it), then reclaims the never-used GPU through the hub;
    the admin sees the reclaim on the admin page; nothing the hub's ServiceAccount asked
    was refused."""
    await the_service_answers(release)
    alice = await logged_in(release, "alice")
    try:
        status, page, _ = await alice.call("GET", "")
        assert status == 200 and "alice" in page
        assert 'id="gpu-reclaim-panel"' in await alice.page("home")  # the hub's templates (template_paths)
        spawn_page = await alice.page("spawn")
        assert 'value="gpu-1"' in spawn_page and 'value="gpu-2"' in spawn_page
        await alice.spawn("gpu-1")
        api = HubAPI(release.url, await alice.token("alice"))
        try:
            server = await api.wait_ready("alice", timeout=120)
            pod = json.loads(release.kubectl("get", "pod", "jupyter-alice", "-o", "json"))
            assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
            assert pod["spec"]["nodeName"].startswith("gpu-")
            annotations = pod["metadata"].get("annotations") or {}
            assert TIMINGS_ANNOTATION in annotations, (
                f"jupyter-alice has no {TIMINGS_ANNOTATION} annotation; the hub: "
                + _record(release.hub_log(), "could not annotate"))
            assert json.loads(annotations[TIMINGS_ANNOTATION])

            async def warned():
                _, body = await alice.json("GET", "api/sessions")
                return next((s for s in body.get("sessions", []) if s["state"] == "warned"), None)
            session = await until(warned, 60, "alice's session warned")
            assert session["rule"] == "gpu-never-used" and session["reclaim_at"]
            # the JupyterLab extension's server side calls the service with the server's token
            # (server_token_scopes) at singleuser.extraEnv's URL, through proxy-public
            async with api.session.get(f"{release.url}/user/alice/gpu-reclaim/status") as r:
                lab = await r.json()
            assert r.status == 200 and lab["available"] and lab["session"]["state"] == "warned", lab
            _, banner, _ = await alice.call("GET", "embed/banner")
            assert "banner warned" in banner
            # reclaimed through the hub: her server and pod are gone, the reclaim is hers to see
            await until(lambda: _gone(api), 60, "alice's server reclaimed")
            await until(lambda: not release.kubectl("get", "pods", "-l", "hub.jupyter.org/username=alice",
                                                    "-o", "name").strip(), 60, "alice's pod deleted")
            _, body = await alice.json("GET", "api/sessions")
            assert [r["session"] for r in body["reclaims"]] == ["alice/"]
            assert server["started"]
        finally:
            await api.close()
    finally:
        await alice.close()
    values = _metrics(release)
    assert metric(values, "jupyterhub_gpu_reclaim_reclaims_total", rule="gpu-never-used", outcome="stopped") == 1
    admin = await logged_in(release, ADMINS[0])
    try:
        status, body = await admin.json("GET", "api/admin/history?since=1h")
        assert status == 200 and [r["session"] for r in body["reclaims"]] == ["alice/"], body
    finally:
        await admin.close()
    assert not forbidden(sim), forbidden(sim)
    log = release.hub_log()
    assert "image locality off" not in log and "could not annotate" not in log


def _record(log: str, needle: str) -> str:
    """The log record with `needle`, its continuation lines joined, without HTTP headers."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if needle in line), None)
    if start is None:
        return ""
    record = [lines[start]]
    for line in lines[start + 1:]:
        if line.startswith("["):
            break
        if not line.strip().startswith("HTTP response headers"):
            record.append(line.strip())
    return " ".join(record)


async def _gone(api: HubAPI) -> bool:
    return await api.server("alice") is None


# --- the base release ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(cluster):
    variants = [USER_ROLE] if hub_major() == 5 else []
    return install(cluster, *variants, extra={
        "custom": {"gpuReclaim": {"options": TIMINGS}},
        "hub": {"loadRoles": {"gpu-reclaim-admins": {"users": RECLAIM_ADMINS}}}})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base_settings(base) -> dict:
    await first_cycle(base)
    return settings(base)


@pytest.mark.hub_contract
async def test_the_hub_runs_the_charts_config_on_the_rendered_values(cluster, base, base_settings):
    log = base.hub_log()
    # the chart's jupyterhub_config.py read the rendered Secret and ran gpu-reclaim.yaml's extraConfig
    assert "Loading /usr/local/etc/jupyterhub/secret/values.yaml" in log
    assert "Loading extra config: gpu-reclaim" in log
    assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in log
    status, body = _status(f"{base.url}/hub/api/")
    assert status == 200 and json.loads(body)["version"] == live.HUB_VERSION  # the hub environment's
    got = base_settings
    # the service reaches the hub's API in its own pod, as the chart's idle culler does
    assert got["url"] == "http://localhost:8081/hub/api"
    assert got["bind_url"] == "http://0.0.0.0:10101"
    assert got["store_url"] == "sqlite:////srv/jupyterhub/gpu_reclaim.sqlite"  # on the hub's PVC
    assert got["dcgm_exporter_urls"] == [z2jh.DCGM_URL] and got["cull_every"] == 2 and not got["dry_run"]
    # jupyterhub-idle-culler's options keep the chart's cull.* defaults (cull-every: TIMINGS)
    cull = yaml.safe_load((CHART / "values.yaml").read_text())["cull"]
    for option in IDLE_CULLER_OPTIONS:
        key = re.sub(r"_(\w)", lambda m: m.group(1).upper(), option)
        if key in cull and option != "cull_every":
            assert got[option] == cull[key], option


@pytest.mark.hub_contract
async def test_the_services_token_has_the_documented_scopes(base):
    """The chart generated the service's token (the hub Secret); the hub gives it the
    gpu-reclaim role's scopes, and none that would let it act as an admin: no `tokens`
    (worth an admin's token, issue 27), whose work the probe-token API in the hub does."""
    secret = json.loads(base.kubectl("get", "secret", "hub", "-o", "json"))
    token = base64.b64decode(secret["data"]["hub.services.gpu-reclaim.apiToken"]).decode()
    status, body = _status(f"{base.url}/hub/api/user", token)
    me = json.loads(body)
    assert status == 200 and me["kind"] == "service" and me["name"] == "gpu-reclaim"
    scopes = set(me["scopes"])
    assert SERVICE_SCOPES <= scopes
    assert not {"admin:users", "admin:servers", "servers", "users", "access:servers", "tokens"} & scopes
    request = urllib.request.Request(f"{base.url}/hub/api/users/admin/tokens", data=b"{}", method="POST",
                                     headers={"Authorization": f"token {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403
    # the probe-token API is installed (extraConfig's configure_hub): it refuses a body
    # without a probe scope (400), where a hub without it would answer 404
    request = urllib.request.Request(f"{base.url}/hub/api/gpu-reclaim/users/admin/tokens", data=b"{}",
                                     method="POST", headers={"Authorization": f"token {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400


@pytest.mark.hub_contract
async def test_a_never_used_gpu_is_warned_then_reclaimed(cluster, base, base_settings):
    await gpu_story(cluster, base)


@pytest.mark.hub_contract
async def test_the_admin_page_is_the_admins_and_the_roles_members(base, base_settings):
    """The hub's admins and the role's other members hold the admin scope (the hub's admin
    flag alone gives nothing); alice does not. Only gpu-reclaim runs: no idle culler."""
    for name in [*ADMINS, *RECLAIM_ADMINS]:
        admin = await logged_in(base, name)
        try:
            assert "custom:gpu-reclaim:admin" in await admin.scopes(name)
            status, body = await admin.json("GET", "api/admin/queue")
            assert status == 200, body
            if name in ADMINS:
                api = HubAPI(base.url, await admin.token(name))
                try:
                    assert list(await api.request("GET", "/services")) == ["gpu-reclaim"]
                finally:
                    await api.close()
        finally:
            await admin.close()
    alice = await logged_in(base, "alice")
    try:
        status, _ = await alice.json("GET", "api/admin/queue")
        assert status == 403
    finally:
        await alice.close()


@pytest.mark.hub_contract
async def test_the_pages_log_in_through_the_hubs_oauth(base, base_settings):
    """A browser without the service's cookie is sent to the hub's OAuth authorize with a
    `state` (tied to the browser by the login's state cookie); JupyterHub 6 adds a PKCE
    challenge, JupyterHub 5 has none (docs/install-z2jh.md, JupyterHub 5 and 6). The login
    itself is the story's (alice, and the admins above)."""
    nobody = Client(base.url)
    try:
        status, _, r = await nobody.call("GET", "")
    finally:
        await nobody.close()
    location = r.headers["Location"]
    assert status == 302 and "/hub/api/oauth2/authorize" in location, (status, location)
    assert "token" not in location.split("?", 1)[0]
    query = parse_qs(urlsplit(location).query)
    assert query["state"][0] and query["client_id"] == ["service-gpu-reclaim"]
    if hub_major() >= 6:
        assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    else:
        assert "code_challenge" not in query


@pytest.mark.hub_contract
async def test_the_hubs_stop_answers_are_the_ones_the_stopper_knows(base, base_settings):
    """The service's stops with its own token against the release's hub: a server that is not
    running (204) and a user the hub does not have (404) are already stopped; the story's
    reclaim is the running server's stop (202 while KubeSpawner deletes the pod, or 204)."""
    secret = json.loads(base.kubectl("get", "secret", "hub", "-o", "json"))
    token = base64.b64decode(secret["data"]["hub.services.gpu-reclaim.apiToken"]).decode()
    stopper = HubStopper(f"{base.url}/hub/api", token, stop_timeout=30, retries=0)
    stopped = await stopper.stop("bob")  # a user of the hub without a running server
    assert stopped.outcome == "stopped" and stopped.attempts == 1 and not stopped.detail, stopped
    missing = await stopper.stop("nobody-" + secrets.token_hex(4))
    assert missing.outcome == "already-stopped" and "HTTP 404" in missing.detail, missing


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


# what docs/install-z2jh.md says each variant does (the place's values keep dcgm-exporter)
SAYS = {
    "dry-run.yaml": {"dry_run": True, "admin_recipients": ["admin"]},
    "dcgm-direct.yaml": {"prometheus_url": "", "dcgm_exporter_urls": [z2jh.DCGM_URL]},
    "pressure-only.yaml": {"pressure_only": True, "dry_run": False},
    "princeton-like.yaml": {"never_used_reclaim_after": 7200, "idle_reclaim_after": 7200, "idle_warn_after": 3600,
                            "warning_lead": 3600, "gpu_idle_threshold": 1},
    "yale-like.yaml": {"never_used_warn_after": 1800, "never_used_reclaim_after": 3600,
                       "idle_warn_after": 3600, "idle_reclaim_after": 7200},
    "postgresql.yaml": {"store_url": "postgresql+psycopg2://jupyterhub@postgres.jhub.svc:5432/gpu_reclaim"},
    USER_ROLE: {},
}


def postgres(password: str) -> list[dict]:
    """A PostgreSQL server at postgres.jhub.svc:5432 (postgresql.yaml's address), Debian's
    PostgreSQL 15 standing in for the postgres image: user jupyterhub with `password`
    (scram-sha-256 from anywhere), databases jupyterhub and gpu_reclaim (as the variant's
    comment tells the admin to create)."""
    script = """set -e
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


async def test_every_variant_is_tested():
    assert set(SAYS) == {p.name for p in VARIANTS}


def _hub_side(variant: str) -> bool:
    """Whether the variant changes the hub's values (hub.*), not only the service's options."""
    return "hub" in (yaml.safe_load((HELM_VALUES / variant).read_text()) or {})


# postgresql.yaml is JupyterHub 5's release without jupyterhub5-user-role.yaml (hub_contract)
@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.hub_contract) if v == "postgresql.yaml"
                                     else v for v in sorted(SAYS)])
async def test_each_variant_loads_in_the_hub_and_runs_the_service_as_it_says(cluster, base_settings, variant):
    """gpu-reclaim.yaml and the variant alone: the hub loads them, the service runs with
    the variant's settings and otherwise the base release's (which adds TIMINGS), and
    users reach the service's pages where the hub grants them access: JupyterHub 6 by
    gpu-reclaim.yaml's extra_user_scopes, JupyterHub 5 by the user role override only.

    A variant of the service's options alone runs on JupyterHub 6 only: the options reach
    the service the same way on both (a command line), and each install costs half a
    minute of hub and service start. One that changes the hub's values runs on both."""
    if hub_major() == 5 and not _hub_side(variant):
        pytest.skip("the service's options reach it as on JupyterHub 6, where this variant runs")
    if hub_major() == 5 and variant == USER_ROLE:
        pytest.skip("the JupyterHub 5 base release includes it (the story and the admin page)")
    extra, objects = None, None
    if variant == "postgresql.yaml":
        if not POSTGRES_BIN.is_dir():
            pytest.fail(f"{POSTGRES_BIN} is missing: scripts/setup.sh installs Debian's postgresql")
        password = secrets.token_hex(12)
        extra, objects = {"hub": {"db": {"password": password}}}, postgres(password)
    release = install(cluster, variant, extra=extra, objects=objects)
    values = await first_cycle(release)
    got = settings(release)
    options = _variant_options(variant)
    for name, value in {**_expected(options), **SAYS[variant]}.items():
        assert got[name] == value, (variant, name, got[name])
    changed = {name for name in got if got[name] != base_settings[name]}
    assert changed <= {k.replace("-", "_") for k in [*options, *TIMINGS]}, changed
    assert metric(values, "jupyterhub_gpu_reclaim_dry_run") == float(got["dry_run"])
    log = release.hub_log()
    access = hub_major() >= 6 or variant == USER_ROLE
    alice = await logged_in(release, "alice", to_service=False)
    try:
        token = await alice.token("alice")
    finally:
        await alice.close()
    me = json.loads(_status(f"{release.url}/hub/api/user", token)[1])
    scopes = {s for s in me["scopes"] if s.startswith("access:services")}
    assert scopes == ({ACCESS} if access else set()), me["scopes"]
    assert _status(f"{release.url}{PREFIX}", token)[0] == (200 if access else 403)
    if not access:  # what docs/install-z2jh.md says of JupyterHub 5 without the user role
        assert "Config option `extra_user_scopes` not recognized by `JupyterHub`" in log
    if variant == "postgresql.yaml":
        # the hub's users and the service's records are in the server, its password passed on
        assert _postgres(release, password, "jupyterhub", "SELECT name FROM users WHERE name = 'alice'") == \
            [("alice",)]
        assert _postgres(release, password, "gpu_reclaim", "SELECT count(*) FROM schema_version") == [(1,)]
        assert password not in log
    assert not forbidden(cluster), forbidden(cluster)


def _postgres(release: z2jh.Release, password: str, database: str, query: str) -> list[tuple]:
    """`query`'s rows in the release's PostgreSQL server (at its Service's cluster IP)."""
    import psycopg2

    host = release.kubectl("get", "service", "postgres", "-o", "jsonpath={.spec.clusterIP}")
    connection = psycopg2.connect(host=host, user="jupyterhub", password=password, dbname=database,
                                  connect_timeout=10)
    try:
        with connection.cursor() as cursor:
            cursor.execute(query)
            return cursor.fetchall()
    finally:
        connection.close()


# --- the checks bite --------------------------------------------------------------------------


def _without_patch() -> list[dict]:
    """rbac.yaml without `patch` on pods."""
    objects = z2jh.rbac()
    for doc in objects:
        for rule in doc.get("rules", []):
            if "pods" in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
        if "rules" in doc:
            doc["rules"] = [r for r in doc["rules"] if r["verbs"]]
    return objects


async def test_without_patch_in_rbac_yaml_the_story_fails_at_the_annotation(cluster):
    release = install(cluster, *([USER_ROLE] if hub_major() == 5 else []), rbac=_without_patch(),
                      extra={"custom": {"gpuReclaim": {"options": TIMINGS}}})
    with pytest.raises(AssertionError) as failure:
        await gpu_story(cluster, release)
    message = str(failure.value)
    print(f"the story failed as it should: {message}")
    assert f"jupyter-alice has no {TIMINGS_ANNOTATION} annotation" in message
    assert "cannot patch resource" in message, message
    assert any("PATCH /api/v1/namespaces/jhub/pods/jupyter-alice" in line for line in forbidden(cluster))


async def test_without_the_10101_rule_the_story_fails_at_the_service(cluster):
    values = yaml.safe_load(BASE.read_text())
    assert [r["ports"] for r in values["hub"]["networkPolicy"]["ingress"]] == [[{"port": 10101}]]
    release = install(cluster, *([USER_ROLE] if hub_major() == 5 else []),
                      extra={"hub": {"networkPolicy": {"ingress": []}}})
    # the hub works; the service runs in its pod, but the proxy's connections to hub:10101 are refused
    assert _status(f"{release.url}/hub/login")[0] == 200
    with pytest.raises(AssertionError) as failure:
        await gpu_story(cluster, release)
    message = str(failure.value)
    print(f"the story failed as it should: {message}")
    assert re.search(rf"the service's {PREFIX}metrics through proxy-public answered 50[23]", message), message
