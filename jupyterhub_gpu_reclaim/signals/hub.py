"""The hub signal: every ready server, listed as jupyterhub-idle-culler 2.0 lists them.

`GET {api_url}/users?state=ready&limit=N` with `Accept: application/jupyterhub-pagination+json`,
following `_pagination.next.url` until it is null (the package requires JupyterHub 5, whose
hub paginates and filters by `state`). Every request runs under one semaphore (`concurrency`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
import sys
from dataclasses import dataclass, field
from typing import Any, AsyncIterator
from urllib.parse import urlencode


from ..oneline import brief
from .http_source import HttpSource, SignalError, entry_field, entry_time, get_json

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.hub")

# JupyterHub's paginated form of a list (its REST API's Accept header; web/api.py serves it too)
PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"


@dataclass(frozen=True, eq=False, slots=True)
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
    invalid: str | None = None  # why the models could not be read: the session is held
    # the server model as the hub gave it: what idle-culler 2.0 hands its cull_arbiter_hook
    # ({} unless kept: HubSignal's keep_models)
    model: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def session_id(self) -> str:
        """"user/servername", the id observations.Session uses ("alice/" = default): one string
        a session (interned), however often asked. The cycle's maps and the pages' status are
        keyed by it; a copy each held 7 MiB at 20,000 servers."""
        return sys.intern(f"{self.user}/{self.name}")

    @classmethod
    def from_models(cls, user: dict[str, Any], name: str, server: Any, keep_model: bool = True) -> HubServer:
        """The server `name` of the user model `user` (whose "name" is a string), with the
        server's model as `model` if `keep_model`. Never raises: a malformed field of either
        model gives a HubServer with only its identity and `invalid` saying what is wrong
        (the service holds it)."""
        try:
            user_options = entry_field(server, "user_options", dict, {})
            entry_field(user_options, "profile", str)
            return cls(
                user=user["name"],
                admin=entry_field(user, "admin", bool, False),
                groups=tuple(_strings(entry_field(user, "groups", list, []), "groups")),
                name=name,
                last_activity=entry_time(server, "last_activity"),
                started=entry_time(server, "started"),
                pending=entry_field(server, "pending", str),
                ready=_listed_ready(entry_field(server, "ready", bool, False)),
                url=entry_field(server, "url", str, ""),
                user_options=user_options,
                user_last_activity=entry_time(user, "last_activity"),
                user_created=entry_time(user, "created"),
                model=server if keep_model else {},
            )
        except ValueError as e:
            return cls(user=user["name"], name=name, invalid=f"the hub's model of this server: {e}")


def _listed_ready(ready: bool) -> bool:
    if not ready:  # ready_servers leaves out those that say they are not
        raise ValueError("ready: missing in a listing of ready servers")
    return ready


def _strings(values: list, key: str) -> list[str]:
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key}: not a list of strings: {brief(values)}")
    return values


class HubSignal(HttpSource):
    """Lists the hub's ready servers. Needs the scopes `list:users`, `read:users:activity`,
    `read:servers` (idle-culler's read scopes; `read:users:groups`/`read:users` for groups
    and the admin flag)."""

    def __init__(self, api_url: str, token: str, page_size: int = 50, concurrency: int = 10,
                 timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None,
                 keep_models: bool = False) -> None:
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
        # each HubServer's `model`: only a cull_arbiter_hook reads it (20,000 of them are ~20 MiB)
        self.keep_models = keep_models
        self.requests = 0  # hub requests made, for benchmarks and metrics

    async def _get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        async with self._semaphore:
            self.requests += 1
            return await get_json(self._client(), url, source="hub", timeout=self.timeout,
                                  headers=headers)

    async def pages(self, state: str | None = "ready") -> AsyncIterator[list[dict[str, Any]]]:
        """The user models `GET /users` lists (with `state` if given), a page at a time: a
        caller that keeps a few fields of each holds one page of JSON at a time, not all."""
        params = {}
        if state:
            params["state"] = state
        if self.page_size:
            params["limit"] = str(self.page_size)
        url = f"{self.api_url}/users" + (f"?{urlencode(params)}" if params else "")
        headers = {"Accept": PAGINATION_MEDIA_TYPE}
        pages = 0
        while url:
            page_url, url = url, ""
            model = await self._get(page_url, headers)
            pages += 1
            try:
                items, next_info = model["items"], model["_pagination"]["next"]
                if not isinstance(items, list) or not isinstance(next_info, (dict, type(None))):
                    raise TypeError
                if next_info:
                    url = entry_field(next_info, "url", str, "")
                    if not url:  # be lenient: rebuild it from offset and limit
                        offset, limit = entry_field(next_info, "offset", int), entry_field(next_info, "limit", int)
                        if offset is None or limit is None:
                            raise KeyError("offset")
                        params.update(offset=str(offset), limit=str(limit))
                        url = f"{self.api_url}/users?{urlencode(params)}"
            except (KeyError, TypeError, ValueError):
                raise SignalError("hub", f"GET {page_url.split('?')[0]}: not a user list: {brief(model)}") from None
            del model
            yield _named(items)
        log.debug("fetched %d page(s) of /users", pages)

    async def users(self, state: str | None = "ready") -> list[dict[str, Any]]:
        """Every user model `GET /users` lists (with `state` if given), across pages."""
        return [user async for page in self.pages(state) for user in page]

    async def inactive_users(self) -> list[dict[str, Any]]:
        """Users with no active server (`state=inactive`), for --cull-users as the culler
        does."""
        return await self.users("inactive")

    async def ready_servers(self) -> list[HubServer]:
        """The ready servers; a server whose models are malformed is listed with `invalid`
        set (HubServer.from_models), so that only its own session is held. Each page is read
        into HubServers as it comes (docs/benchmarks.md: with 20,000 users, holding every
        page's models was the cycle's largest memory)."""
        servers = []
        async for page in self.pages("ready"):
            for user in page:
                models = user.get("servers") or {}
                if not isinstance(models, dict):  # which servers? none can be named
                    log.warning("hub: user %s: servers is not an object: %s", user["name"], brief(models))
                    continue
                for name, server in models.items():
                    # with state=ready the hub lists only ready servers; check anyway (a
                    # malformed model is kept: it is held)
                    if isinstance(server, dict) and (server.get("ready") is False
                                                     or isinstance(server.get("pending"), str) and server["pending"]):
                        continue
                    servers.append(HubServer.from_models(user, name, server, keep_model=self.keep_models))
        return servers


def _named(models: list) -> list[dict[str, Any]]:
    """The user models that name their user; the others are logged and left out (no
    session can be told from them)."""
    named = []
    for model in models:
        name = model.get("name") if isinstance(model, dict) else None
        if isinstance(name, str) and name and len(name) <= 1024:
            named.append(model)
        else:
            log.warning("hub: a user model without a name, ignored: %s", brief(model))
    return named
