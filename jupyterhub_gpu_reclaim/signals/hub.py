"""The hub signal: every ready server, listed as jupyterhub-idle-culler 2.0 lists them.

`GET {api_url}/users?state=ready&limit=N` with `Accept: application/jupyterhub-pagination+json`,
following `_pagination.next.url` until it is null. A hub older than 2.0 answers a plain
list (no pagination); a hub older than 1.3 does not know `state=ready`, so — like the
culler, which asks `GET {api_url}/` for the version first — we then list every user and
keep the ready servers ourselves. Every request runs under one semaphore (`concurrency`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode


from .base import HttpSource, SignalError, get_json, parse_time

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.hub")

PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"
STATE_FILTER_MIN_VERSION = (1, 3, 0)


@dataclass(frozen=True, eq=False)
class HubServer:
    """One ready server of one user, as the hub's user model describes it."""

    user: str
    admin: bool = False
    groups: tuple[str, ...] = ()
    name: str = ""  # "" is the default server
    last_activity: dt.datetime | None = None
    started: dt.datetime | None = None
    pending: str | None = None
    ready: bool = False
    url: str = ""  # "/user/alice/" — the path under the proxy's public URL
    user_options: dict[str, Any] = field(default_factory=dict)
    user_last_activity: dt.datetime | None = None
    user_created: dt.datetime | None = None

    @property
    def session_id(self) -> str:
        """"user/servername", the id observations.Session uses ("alice/" = default)."""
        return f"{self.user}/{self.name}"

    @classmethod
    def from_models(cls, user: dict[str, Any], name: str, server: dict[str, Any]) -> HubServer:
        return cls(
            user=user["name"],
            admin=bool(user.get("admin", False)),
            groups=tuple(user.get("groups") or ()),
            name=name,
            last_activity=parse_time(server.get("last_activity")),
            started=parse_time(server.get("started")),
            pending=server.get("pending"),
            ready=bool(server.get("ready", False)),
            url=server.get("url") or "",
            user_options=dict(server.get("user_options") or {}),
            user_last_activity=parse_time(user.get("last_activity")),
            user_created=parse_time(user.get("created")),
        )


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


class HubSignal(HttpSource):
    """Lists the hub's ready servers. Needs the scopes `list:users`, `read:users:activity`,
    `read:servers` (idle-culler's read scopes; `read:users:groups`/`read:users` for groups
    and the admin flag)."""

    def __init__(self, api_url: str, token: str, page_size: int = 50, concurrency: int = 10,
                 timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None) -> None:
        if page_size < 0:
            raise ValueError("page_size must be >= 0 (0: the hub's default page size)")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.api_url = api_url.rstrip("/")
        self.page_size = page_size
        self.timeout = timeout
        self._headers = {"Authorization": f"token {token}"}
        self._semaphore = asyncio.Semaphore(concurrency)
        self.ssl_context = ssl_context
        self._state_filter: bool | None = None
        self.requests = 0  # hub requests made, for benchmarks and metrics

    async def _get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        async with self._semaphore:
            self.requests += 1
            return await get_json(self._client(), url, source="hub", timeout=self.timeout,
                                  headers=headers)

    async def _supports_state_filter(self) -> bool:
        if self._state_filter is None:
            info = await self._get(f"{self.api_url}/")
            version = _version(str(info.get("version", ""))) if isinstance(info, dict) else ()
            if not version:
                raise SignalError("hub", f"GET {self.api_url}/: no hub version in {info!r:.200}")
            self._state_filter = version >= STATE_FILTER_MIN_VERSION
        return self._state_filter

    async def users(self, state: str | None = "ready") -> list[dict[str, Any]]:
        """Every user model `GET /users` lists (with `state` if given), across pages."""
        params = {}
        if state:
            params["state"] = state
        if self.page_size:
            params["limit"] = str(self.page_size)
        url = f"{self.api_url}/users" + (f"?{urlencode(params)}" if params else "")
        headers = {"Accept": PAGINATION_MEDIA_TYPE}
        users: list[dict[str, Any]] = []
        pages = 0
        while url:
            model = await self._get(url, headers)
            pages += 1
            if isinstance(model, list):  # hub < 2.0: no pagination
                users.extend(model)
                break
            try:
                items = model["items"]
                next_info = model["_pagination"]["next"]
            except (KeyError, TypeError):
                raise SignalError("hub", f"GET {url.split('?')[0]}: not a user list: {model!r:.200}") from None
            users.extend(items)
            url = ""
            if next_info:
                url = next_info.get("url") or ""
                if not url:  # be lenient: rebuild it from offset and limit
                    params.update(offset=str(next_info["offset"]), limit=str(next_info["limit"]))
                    url = f"{self.api_url}/users?{urlencode(params)}"
                log.debug("fetching page %d of /users", pages + 1)
        log.debug("fetched %d users in %d page(s)", len(users), pages)
        return users

    async def inactive_users(self) -> list[dict[str, Any]]:
        """Users with no active server (`state=inactive`), for --cull-users as the culler
        does; [] on hubs that cannot filter (their ready listing has every user)."""
        if not await self._supports_state_filter():
            return []
        return await self.users("inactive")

    async def ready_servers(self) -> list[HubServer]:
        state_filter = await self._supports_state_filter()
        users = await self.users("ready" if state_filter else None)
        servers = []
        for user in users:
            for name, server in (user.get("servers") or {}).items():
                # with state=ready the hub lists only ready servers; check anyway, and
                # always on hubs that cannot filter
                if server.get("ready") and not server.get("pending"):
                    servers.append(HubServer.from_models(user, name, server))
        return servers
