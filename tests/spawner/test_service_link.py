"""link_to_service: the spawner's link to the reclaim service in a hub's configuration, as
gpu-reclaim.yaml's extraConfig and the demo's own hub make it (the release tests run it in
the chart's hub: tests/release)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

from jupyterhub_gpu_reclaim.spawner.service_link import SPAWNER_SERVICE, link_to_service

ACCESS = "access:services!service=gpu-reclaim"
DEMO_CONFIG = Path(__file__).parents[2] / "gpu_reclaim_sim" / "demo_config" / "jupyterhub_config.py"


def z2jh_config(base_url: str | None = None) -> Config:
    """The hub's config as the chart's jupyterhub_config.py leaves it for extraConfig:
    hub.services with the spawner's entry and the token the chart keeps in the hub Secret."""
    c = Config()
    if base_url is not None:
        c.JupyterHub.base_url = base_url
    c.JupyterHub.services = [{"name": "gpu-reclaim", "url": "http://hub:10101", "api_token": "service-token"},
                             {"name": SPAWNER_SERVICE, "api_token": "spawner-token"}]
    c.JupyterHub.load_roles = [{"name": "gpu-reclaim", "services": ["gpu-reclaim"], "scopes": ["list:users"]}]
    return c


def spawner_role(c: Config) -> dict:
    [role] = [r for r in c.JupyterHub.load_roles if r["name"] == SPAWNER_SERVICE]
    return role


def test_on_z2jh_the_spawner_asks_the_service_in_the_hubs_pod_under_the_base_url():
    for base_url, prefix in [(None, "/"), ("/", "/"), ("/jhub/", "/jhub/"), ("/jhub", "/jhub/")]:
        c = z2jh_config(base_url)
        link_to_service(c, "http://0.0.0.0:10101")
        assert c.GPUReclaimSpawner.reclaim_service_url == f"http://127.0.0.1:10101{prefix}services/gpu-reclaim/"
        assert c.GPUReclaimSpawner.reclaim_service_token == "spawner-token"  # its own, not the service's
        # a role that reaches the service and nothing else, for the spawner's service only
        role = spawner_role(c)
        assert role["scopes"] == [ACCESS] and role["services"] == [SPAWNER_SERVICE]
        assert [r["name"] for r in c.JupyterHub.load_roles if SPAWNER_SERVICE in r["services"]] == [SPAWNER_SERVICE]
        assert [s["name"] for s in c.JupyterHub.services] == ["gpu-reclaim", SPAWNER_SERVICE]
    c = z2jh_config()
    link_to_service(c, "http://10.1.2.3:9000")  # a service listening on one address: that one
    assert c.GPUReclaimSpawner.reclaim_service_url == "http://10.1.2.3:9000/services/gpu-reclaim/"


def test_the_admins_settings_and_role_win():
    c = z2jh_config()
    c.GPUReclaimSpawner.reclaim_service_url = "https://reclaim.example.edu/services/gpu-reclaim/"
    c.GPUReclaimSpawner.reclaim_service_token = "admins-token"
    mine = {"name": SPAWNER_SERVICE, "services": [SPAWNER_SERVICE], "scopes": [ACCESS, "read:users:name"]}
    c.JupyterHub.load_roles = [mine]
    link_to_service(c, "http://0.0.0.0:10101")
    assert c.GPUReclaimSpawner.reclaim_service_url == "https://reclaim.example.edu/services/gpu-reclaim/"
    assert c.GPUReclaimSpawner.reclaim_service_token == "admins-token"
    assert c.JupyterHub.load_roles == [mine]
    c = z2jh_config()
    c.GPUReclaimSpawner.reclaim_service_token = "admins-token"  # one of the two: the other is linked
    link_to_service(c, "http://0.0.0.0:10101")
    assert c.GPUReclaimSpawner.reclaim_service_token == "admins-token"
    assert c.GPUReclaimSpawner.reclaim_service_url == "http://127.0.0.1:10101/services/gpu-reclaim/"


def test_without_a_token_or_a_port_nothing_is_linked_and_the_hub_still_starts():
    for c, bind_url in [(Config(), "http://0.0.0.0:10101"),  # no entry (hub.services' set to null), no token
                        (z2jh_config(), ""),  # no --bind-url and no url: the service serves nothing
                        (z2jh_config(), "http://0.0.0.0:port"),  # the service refuses it at its start
                        (z2jh_config(), "http://0.0.0.0:99999")]:
        before = Config(c)
        link_to_service(c, bind_url)
        assert "reclaim_service_url" not in c.GPUReclaimSpawner and "reclaim_service_token" not in c.GPUReclaimSpawner
        assert c.JupyterHub == before.JupyterHub


def test_a_hub_without_the_entry_gets_one_with_the_token_given():
    c = Config()
    c.JupyterHub.services = [{"name": "gpu-reclaim", "url": "http://127.0.0.1:10123", "command": ["x"]}]
    link_to_service(c, "http://127.0.0.1:10123", token="given")
    assert c.JupyterHub.services[1] == {"name": SPAWNER_SERVICE, "api_token": "given"}  # no command, no url
    assert c.GPUReclaimSpawner.reclaim_service_url == "http://127.0.0.1:10123/services/gpu-reclaim/"
    assert c.GPUReclaimSpawner.reclaim_service_token == "given"
    assert spawner_role(c)["scopes"] == [ACCESS]


def test_the_demos_hub_is_linked_with_a_token_it_keeps_across_restarts(tmp_path, monkeypatch):
    """The demo's own hub (no chart) makes its token once, readable by its owner only, and
    reads it back at the next start: JupyterHub never revokes a config token it no longer has."""
    monkeypatch.chdir(tmp_path)  # the demo's data dir
    monkeypatch.setenv("GPU_RECLAIM_SERVICE_PORT", "10123")

    def load() -> Config:
        loader = PyFileConfigLoader(DEMO_CONFIG.name, str(DEMO_CONFIG.parent))
        return loader.load_config()

    first, second = load(), load()
    token = (tmp_path / "gpu_reclaim_spawner_token").read_text()
    assert len(token) == 64 and stat.S_IMODE(os.stat(tmp_path / "gpu_reclaim_spawner_token").st_mode) == 0o600
    for c in (first, second):
        assert c.GPUReclaimSpawner.reclaim_service_url == "http://127.0.0.1:10123/services/gpu-reclaim/"
        assert c.GPUReclaimSpawner.reclaim_service_token == token
        assert {"name": SPAWNER_SERVICE, "api_token": token} in c.JupyterHub.services
        assert spawner_role(c)["scopes"] == [ACCESS]
        # never in a server's environment
        assert token not in repr(c.Spawner.environment)
