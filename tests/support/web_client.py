"""What the web tests share: a hub running the service with the web pages' configuration
(tests/web/jupyterhub_config_web.py) and slow reclaims (warned after 15 s, reclaimed only
after 15 min), and clients that act as a hub token holder or as a browser with cookies."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import aiohttp

from .service_hub import start_service_hub

HERE = Path(__file__).parents[1] / "web"  # the hub configs of tests/web
PREFIX = "/services/gpu-reclaim/"
PASSWORD = "test-password"
#: hub services (jupyterhub_config_web.py) that carry a user's name and may use the service
SERVICES_NAMED_LIKE_USERS = ("alice",)
TIMINGS = {
    "never_used_warn_after": 15, "never_used_reclaim_after": 900,
    "idle_warn_after": 15, "idle_reclaim_after": 900,
    "warning_lead": 10, "stale_after": 10, "max_keepalive": 4 * 3600,
}


def start_web_hub(workdir: Path, sim, *, dry_run: bool = False, hub_config: Path = HERE / "jupyterhub_config_web.py",
                  env: dict[str, str] | None = None, **overrides):
    """The service tests' hub with the web pages' configuration (or `hub_config`, which loads
    it) and slow reclaims (and the service's settings `overrides`); its
    `info["service_tokens"]` holds the tokens of the hub services named like users."""
    tokens = {name: secrets.token_hex(16) for name in SERVICES_NAMED_LIKE_USERS}
    hub = start_service_hub(workdir, sim, dry_run=dry_run, hub_config=hub_config,
                            env={"GPU_RECLAIM_SERVICE_TOKENS": json.dumps(tokens), **(env or {})},
                            **{"timeout": 3600, "admin_recipients": [], **TIMINGS, **overrides})
    hub.info["service_tokens"] = tokens
    return hub


async def user_token(api, name: str) -> str:
    """A hub token of user `name` (with the user's own scopes)."""
    from urllib.parse import quote

    path = "/users/" + quote(name, safe="")
    async with api.session.get(api.api + path) as r:
        if r.status == 404:
            await api.request("POST", path)
    model = await api.request("POST", f"{path}/tokens", {"note": "web tests", "expires_in": 3600})
    return model["token"]


class Client:
    """The service's pages and API as one caller: a token holder, or a browser (cookies)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"token {token}"} if token else {}
        self.session = aiohttp.ClientSession(headers=headers, cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def close(self) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, **kw) -> tuple[int, str, aiohttp.ClientResponse]:
        kw.setdefault("allow_redirects", False)
        async with self.session.request(method, self.url + PREFIX + path, **kw) as r:
            return r.status, await r.text(), r

    async def json(self, method: str, path: str, body=None, **kw) -> tuple[int, dict]:
        import json
        status, text, _ = await self.call(method, path, json=body, **kw) if body is not None else \
            await self.call(method, path, **kw)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, {"text": text}

    async def log_in(self, user: str, password: str = PASSWORD) -> None:
        """Log in to the hub with the form, then to the service through OAuth."""
        await self.log_in_to_hub(user, password)
        async with self.session.get(self.url + PREFIX) as r:  # follows the OAuth redirects
            assert r.status == 200 and str(r.url).endswith(PREFIX), (r.status, r.url)

    async def log_in_to_hub(self, user: str, password: str = PASSWORD) -> None:
        """Log in to the hub with its login form."""
        async with self.session.get(self.url + "/hub/login") as r:
            page = await r.text()
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
        async with self.session.post(self.url + "/hub/login", data={"username": user, "password": password,
                                                                      "_xsrf": xsrf}) as r:
            assert r.status == 200, await r.text()

    async def xsrf(self, path: str = "") -> str:
        _, page, _ = await self.call("GET", path)
        return re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
