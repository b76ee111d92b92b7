"""The kernel signal: a server's kernels and terminals, read without counting as activity.

`GET <base><server.url>api/kernels?no_track_activity=1` and `.../api/terminals?no_track_activity=1`
with the service's token (scope `access:servers`). `no_track_activity=1` keeps the
single-user server from reporting the probe as activity to the hub.

Where the probe goes matters: configurable-http-proxy records activity for *every*
successful request it proxies, whatever the query string, and the hub copies the proxy's
route activity into the server's `last_activity` every `last_activity_interval`. So a probe
through the public proxy URL does move `last_activity` (tests/signals/test_signals_live.py
shows it); give `direct_url` — the server's own address, `http://{podIP}:{notebook-port}`,
what KubeSpawner itself uses and the pods signal knows — to leave it untouched.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any, Callable, TypeVar


from ..observations import Kernel
from .base import HttpSource, SignalError, brief, entry_field, entry_time, get_json

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.kernels")

NO_TRACK = {"no_track_activity": "1"}
T = TypeVar("T")


def kernels_from_model(model: Any) -> list[Kernel]:
    """The kernels of `/api/kernels`. The user controls this answer: any malformed kernel
    makes the whole answer unusable (SignalError), so the session's kernels are unknown
    and the policy holds its reclaim (kernel-data-missing)."""
    return _each(model, "/api/kernels", lambda k: Kernel(
        execution_state=_required(entry_field(k, "execution_state", str, max_length=64), "execution_state"),
        last_activity=entry_time(k, "last_activity")))


def terminals_from_model(model: Any) -> list[dt.datetime | None]:
    """last_activity of each terminal of `/api/terminals`; SignalError as above."""
    return _each(model, "/api/terminals", lambda t: entry_time(t, "last_activity"))


def _required(value: T | None, key: str) -> T:
    if value is None:
        raise ValueError(f"no {key}")
    return value


def _each(model: Any, path: str, read: Callable[[Any], T]) -> list[T]:
    if not isinstance(model, list):
        raise SignalError("kernels", f"{path}: not a list: {brief(model)}")
    try:
        return [read(entry) for entry in model]
    except ValueError as e:
        raise SignalError("kernels", f"{path}: a malformed entry: {e}") from None


class KernelSignal(HttpSource):
    """Probes users' servers. `hub_url_base` is the proxy's public URL (e.g.
    `http://proxy-public`), to which a server's `url` path (`/user/alice/`) is appended."""

    def __init__(self, hub_url_base: str, token: str, timeout: float = 5.0,
                 concurrency: int = 10) -> None:
        self.hub_url_base = hub_url_base.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"token {token}"}
        self._semaphore = asyncio.Semaphore(concurrency)


    def base_url(self, server_url_path: str, direct_url: str | None = None) -> str:
        path = "/" + server_url_path.strip("/") + "/" if server_url_path.strip("/") else "/"
        return (direct_url or self.hub_url_base).rstrip("/") + path

    async def probe(self, server_url_path: str, direct_url: str | None = None
                    ) -> tuple[list[Kernel], list[dt.datetime | None]]:
        """(kernels, last_activity of each terminal) of the server at `server_url_path`."""
        base = self.base_url(server_url_path, direct_url)
        async with self._semaphore:
            kernels, terminals = await asyncio.gather(
                get_json(self._client(), base + "api/kernels", source="kernels",
                         timeout=self.timeout, params=NO_TRACK),
                self._terminals(base), return_exceptions=True)
        for result in (kernels, terminals):
            if isinstance(result, BaseException):
                raise result
        return kernels_from_model(kernels), terminals_from_model(terminals)

    async def _terminals(self, base: str) -> Any:
        try:
            return await get_json(self._client(), base + "api/terminals", source="kernels",
                                  timeout=self.timeout, params=NO_TRACK)
        except SignalError as e:
            if e.status == 404:  # terminals disabled on this server: there are none
                return []
            raise
