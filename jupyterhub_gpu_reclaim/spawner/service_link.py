"""The spawner's link to the reclaim service: its URL, a hub token for it, and one GET of its
API. The spawner asks it for a user's recent reclaims (resume priority, the reclaim's grace
period) and for when a GPU is expected to be free (the spawn page)."""

from __future__ import annotations

from kubespawner import KubeSpawner
from traitlets import Unicode


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
