"""The spawner's link to the reclaim service: its URL, a hub token for it, and one GET of its
API. The spawner asks it for a user's recent reclaims (resume priority, the reclaim's grace
period) and for when a GPU is expected to be free (the spawn page). `link_to_service` wires
both in a hub's configuration (z2jh: gpu-reclaim.yaml's extraConfig; the demo's own hub)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from jupyterhub.utils import url_path_join
from kubespawner import KubeSpawner
from traitlets import Unicode

#: the spawner's own hub service: no command, no URL, only a token whose role reaches the
#: reclaim service and nothing else (z2jh keeps its token in the hub's Secret)
SPAWNER_SERVICE = "gpu-reclaim-spawner"


class ServiceLink(KubeSpawner):
    reclaim_service_url = Unicode(
        "", config=True,
        help="""The reclaim service's URL, asked for a user's recent reclaims
        (`<url>api/reclaims?user=...`), e.g. http://127.0.0.1:10101/services/gpu-reclaim/.""")

    reclaim_service_token = Unicode(
        "", config=True,
        help="""A hub API token with access to the reclaim service
        (access:services!service=gpu-reclaim), e.g. of a service entry without a command.""")

    async def _ask_service(self, path: str, **params: str) -> dict:
        """GET `path` of the reclaim service's API (reclaim_service_url) with
        reclaim_service_token; RuntimeError for an answer other than 200."""
        import aiohttp

        url = self.reclaim_service_url.rstrip("/") + "/api/" + path
        async with aiohttp.ClientSession() as http:
            async with http.get(url, params=params, timeout=aiohttp.ClientTimeout(total=5),
                                headers={"Authorization": f"token {self.reclaim_service_token}"}) as r:
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}")
                return await r.json()


def link_to_service(c: Any, bind_url: str, token: str = "", service: str = "gpu-reclaim") -> None:
    """Link GPUReclaimSpawner to the reclaim service `service` beside the hub (in its pod),
    listening on `bind_url` (its --bind-url), in a hub's traitlets config `c`:
    reclaim_service_url, that address (loopback for all addresses) under the hub's base_url,
    and reclaim_service_token, the token of the hub service SPAWNER_SERVICE. That service is
    the configuration's (z2jh: hub.services, its token in the hub's Secret, kept across
    upgrades and restarts) or added with `token`; its role, added unless `c` has one of that
    name, holds only access to `service`. What the configuration already sets for the two
    traits wins; without a token or a port nothing is linked (the spawner goes without)."""
    services = list(c.JupyterHub.services) if "services" in c.JupyterHub else []
    entry = next((s for s in services if s.get("name") == SPAWNER_SERVICE), None)
    if entry is None and token:
        entry = {"name": SPAWNER_SERVICE, "api_token": token}
        services.append(entry)
    listen = urlsplit(bind_url)
    try:
        port = listen.port
    except ValueError:  # the service refuses it at its start, with the reason; the hub starts
        port = None
    if entry is None or not entry.get("api_token") or not port:
        return
    c.JupyterHub.services = services
    roles = list(c.JupyterHub.load_roles) if "load_roles" in c.JupyterHub else []
    if not any(role.get("name") == SPAWNER_SERVICE for role in roles):
        c.JupyterHub.load_roles = [*roles, {
            "name": SPAWNER_SERVICE,
            "description": "GPUReclaimSpawner asks the reclaim service about users' reclaims and the GPU queue",
            "scopes": [f"access:services!service={service}"],
            "services": [SPAWNER_SERVICE]}]
    spawner = c.GPUReclaimSpawner
    if "reclaim_service_url" not in spawner:
        host = "127.0.0.1" if listen.hostname in ("0.0.0.0", "::") else listen.netloc.rpartition(":")[0]
        base_url = c.JupyterHub.base_url if "base_url" in c.JupyterHub else "/"
        spawner.reclaim_service_url = f"http://{host}:{port}" + url_path_join(base_url, f"services/{service}/")
    if "reclaim_service_token" not in spawner:
        spawner.reclaim_service_token = entry["api_token"]
