"""The release through proxy-public, as its users and the tests reach it: plain HTTP
answers, the service's metrics once it runs, and a browser that logs in to the hub and
to the service's pages."""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.request

from gpu_reclaim_sim.z2jh import release as z2jh

from .hubapi import HubAPI
from .release import PASSWORD
from .service_hub import metric, parse_metrics, until
from .web_client import PREFIX, Client


def get(url: str, token: str | None = None) -> tuple[int, str]:
    """A GET's status and body, an error's included."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def metrics(release: z2jh.Release) -> dict:
    code, text = get(f"{release.url}{PREFIX}metrics")
    return parse_metrics(text) if code == 200 else {}


async def first_cycle(release: z2jh.Release) -> dict:
    """The service's metrics once it has run a successful cycle."""
    def ok():
        values = metrics(release)
        return values if metric(values, "jupyterhub_gpu_reclaim_cycles_total", result="ok") else None
    return await until(ok, 60, "a successful cycle of the service", interval=1)


async def the_service_answers(release: z2jh.Release) -> None:
    """The service's /metrics through proxy-public, once the service serves it in the hub
    pod and the hub has routed it (before, the hub answers 404): 200, or what the proxy
    answered instead."""
    def routed():
        code, body = get(f"{release.url}{PREFIX}metrics")
        return None if code == 404 or "serving /metrics on" not in release.hub_log() else (code, body)
    code, body = await until(routed, 60, "the service serving, and routed by the hub", interval=1)
    # the text of the proxy's or the hub's error page
    text = " ".join(re.sub(r"<[^>]*>", " ", re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", body)).split())
    assert code == 200, f"the service's {PREFIX}metrics through proxy-public answered {code}: {text[:300]}"


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


async def logged_in(release: z2jh.Release, name: str, *, to_service: bool = True) -> User:
    user = User(release.url)
    try:
        await (user.log_in(name, PASSWORD) if to_service else user.log_in_to_hub(name, PASSWORD))
    except BaseException:
        await user.close()
        raise
    return user
