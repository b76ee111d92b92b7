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

import json
import re
import secrets
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from gpu_reclaim_sim.z2jh.release import BASE, CHART, DCGM_URL
from jupyterhub_gpu_reclaim.service.hub_stopper import HubStopper
from jupyterhub_gpu_reclaim.application import IDLE_CULLER_OPTIONS
from jupyterhub_gpu_reclaim.spawner.core import TIMINGS_ANNOTATION
from jupyterhub_gpu_reclaim.spawner.service_link import SPAWNER_SERVICE

from ..support import live
from ..support.live import hub_major
from ..support.chart_values import SERVICE_SCOPES, VARIANTS, expected_settings, hub_side, variant_options
from ..support.hubapi import HubAPI
from ..support.postgres import require_postgres
from ..support.release import (ADMINS, RECLAIM_ADMINS, TIMINGS, USER_ROLE, forbidden, hub_variants, install,
                               rbac_without_patch, service_token, settings)
from ..support.release_client import first_cycle, get, logged_in
from ..support.release_postgres import postgres_objects, rows
from ..support.release_story import gpu_story
from ..support.service_hub import metric
from ..support.web_client import PREFIX, Client

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ACCESS = "access:services!service=gpu-reclaim"


# --- the base release (conftest.py: base, base_settings) -----------------------------------------


@pytest.mark.hub_contract
async def test_the_hub_runs_the_charts_config_on_the_rendered_values(cluster, base, base_settings):
    log = base.hub_log()
    # the chart's jupyterhub_config.py read the rendered Secret and ran gpu-reclaim.yaml's extraConfig
    assert "Loading /usr/local/etc/jupyterhub/secret/values.yaml" in log
    assert "Loading extra config: gpu-reclaim" in log
    assert "Using Spawner: jupyterhub_gpu_reclaim.spawner.core.GPUReclaimSpawner" in log
    status, body = get(f"{base.url}/hub/api/")
    assert status == 200 and json.loads(body)["version"] == live.HUB_VERSION  # the hub environment's
    got = base_settings
    # the service reaches the hub's API in its own pod, as the chart's idle culler does
    assert got["url"] == "http://localhost:8081/hub/api"
    assert got["bind_url"] == "http://0.0.0.0:10101"
    assert got["store_url"] == "sqlite:////srv/jupyterhub/gpu_reclaim.sqlite"  # on the hub's PVC
    assert got["dcgm_exporter_urls"] == [DCGM_URL] and got["cull_every"] == 2 and not got["dry_run"]
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
    token = service_token(base)
    status, body = get(f"{base.url}/hub/api/user", token)
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
async def test_the_spawners_token_reaches_the_service_and_nothing_else(base, base_settings):
    """The spawner's own token (hub.services.gpu-reclaim-spawner, generated by the chart):
    the service answers it for any user's reclaims and queue, as the spawner asks (the story
    shows the spawner itself asking, from the hub's pod); the hub's API refuses it all else.
    Nowhere in a user's pod: the story."""
    token = service_token(base, SPAWNER_SERVICE)
    assert token != service_token(base)
    status, body = get(f"{base.url}/hub/api/user", token)
    me = json.loads(body)
    assert status == 200 and me["kind"] == "service" and me["name"] == SPAWNER_SERVICE
    assert set(me["scopes"]) == {ACCESS}, me["scopes"]
    for path in ("reclaims?user=alice&since=1h", "queue?user=bob"):
        status, body = get(f"{base.url}{PREFIX}api/{path}", token)
        assert status == 200 and json.loads(body), (path, status, body)
    status, _ = get(f"{base.url}{PREFIX}api/admin/queue", token)  # the admin API: not without the scope
    assert status == 403
    for path in ("users", "users/alice", "services", "groups", "proxy"):
        assert get(f"{base.url}/hub/api/{path}", token)[0] == 403, path
    for method, path in [("POST", "users/alice/tokens"), ("POST", "users/alice/server"),
                         ("DELETE", "users/alice/server"), ("POST", "users/mallory"),
                         ("POST", "gpu-reclaim/users/alice/tokens")]:
        request = urllib.request.Request(f"{base.url}/hub/api/{path}", data=b"{}" if method == "POST" else None,
                                         method=method, headers={"Authorization": f"token {token}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403, (method, path)


@pytest.mark.hub_contract
async def test_a_never_used_gpu_is_warned_then_reclaimed(cluster, base, base_settings):
    await gpu_story(cluster, base)


@pytest.mark.hub_contract
async def test_the_admin_page_is_the_admins_and_the_roles_members(base, base_settings):
    """The hub's admins and the role's other members hold the admin scope (the hub's admin
    flag alone gives nothing); alice does not. Only gpu-reclaim runs: no idle culler (the
    spawner's service has no command)."""
    for name in [*ADMINS, *RECLAIM_ADMINS]:
        admin = await logged_in(base, name)
        try:
            assert "custom:gpu-reclaim:admin" in await admin.scopes(name)
            status, body = await admin.json("GET", "api/admin/queue")
            assert status == 200, body
            if name in ADMINS:
                api = HubAPI(base.url, await admin.token(name))
                try:
                    assert sorted(await api.request("GET", "/services")) == ["gpu-reclaim", SPAWNER_SERVICE]
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
    token = service_token(base)
    stopper = HubStopper(f"{base.url}/hub/api", token, stop_timeout=30, retries=0)
    stopped = await stopper.stop("bob")  # a user of the hub without a running server
    assert stopped.outcome == "stopped" and stopped.attempts == 1 and not stopped.detail, stopped
    missing = await stopper.stop("nobody-" + secrets.token_hex(4))
    assert missing.outcome == "already-stopped" and "HTTP 404" in missing.detail, missing


# --- every variant -------------------------------------------------------------------------------


# what docs/install-z2jh.md says each variant does (the place's values keep dcgm-exporter)
SAYS = {
    "dry-run.yaml": {"dry_run": True, "admin_recipients": ["admin"]},
    "dcgm-direct.yaml": {"prometheus_url": "", "dcgm_exporter_urls": [DCGM_URL]},
    "pressure-only.yaml": {"pressure_only": True, "dry_run": False},
    "princeton-like.yaml": {"never_used_reclaim_after": 7200, "idle_reclaim_after": 7200, "idle_warn_after": 3600,
                            "warning_lead": 3600, "gpu_idle_threshold": 1},
    "yale-like.yaml": {"never_used_warn_after": 1800, "never_used_reclaim_after": 3600,
                       "idle_warn_after": 3600, "idle_reclaim_after": 7200},
    "postgresql.yaml": {"store_url": "postgresql+psycopg2://jupyterhub@postgres.jhub.svc:5432/gpu_reclaim"},
    USER_ROLE: {},
}


async def test_every_variant_is_tested():
    assert set(SAYS) == {p.name for p in VARIANTS}


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
    if hub_major() == 5 and not hub_side(variant):
        pytest.skip("the service's options reach it as on JupyterHub 6, where this variant runs")
    if hub_major() == 5 and variant == USER_ROLE:
        pytest.skip("the JupyterHub 5 base release includes it (the story and the admin page)")
    extra, objects = None, None
    if variant == "postgresql.yaml":
        require_postgres()
        password = secrets.token_hex(12)
        extra, objects = {"hub": {"db": {"password": password}}}, postgres_objects(password)
    release = install(cluster, variant, extra=extra, objects=objects)
    values = await first_cycle(release)
    got = settings(release)
    options = variant_options(variant)
    for name, value in {**expected_settings(options), **SAYS[variant]}.items():
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
    me = json.loads(get(f"{release.url}/hub/api/user", token)[1])
    scopes = {s for s in me["scopes"] if s.startswith("access:services")}
    assert scopes == ({ACCESS} if access else set()), me["scopes"]
    assert get(f"{release.url}{PREFIX}", token)[0] == (200 if access else 403)
    if not access:  # what docs/install-z2jh.md says of JupyterHub 5 without the user role
        assert "Config option `extra_user_scopes` not recognized by `JupyterHub`" in log
    if variant == "postgresql.yaml":
        # the hub's users and the service's records are in the server, its password passed on
        assert rows(release, password, "jupyterhub", "SELECT name FROM users WHERE name = 'alice'") == \
            [("alice",)]
        assert rows(release, password, "gpu_reclaim", "SELECT count(*) FROM schema_version") == [(1,)]
        assert password not in log
    assert not forbidden(cluster), forbidden(cluster)


# --- the checks bite --------------------------------------------------------------------------


async def test_without_patch_in_rbac_yaml_the_story_fails_at_the_annotation(cluster):
    release = install(cluster, *hub_variants(), rbac=rbac_without_patch(),
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
    release = install(cluster, *hub_variants(), extra={"hub": {"networkPolicy": {"ingress": []}}})
    # the hub works; the service runs in its pod, but the proxy's connections to hub:10101 are refused
    assert get(f"{release.url}/hub/login")[0] == 200
    with pytest.raises(AssertionError) as failure:
        await gpu_story(cluster, release)
    message = str(failure.value)
    print(f"the story failed as it should: {message}")
    assert re.search(rf"the service's {PREFIX}metrics through proxy-public answered 50[23]", message), message
