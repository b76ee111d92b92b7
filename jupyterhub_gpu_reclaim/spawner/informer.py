"""A list + watch of a cluster-wide resource (nodes, every pod), shared by all spawners, for
image locality: which nodes hold an image, and the room left on each.

The spawner's own pod and the GPU queue it tells its user about are read from KubeSpawner's
shared pod reflector (`pod_reflector`), never from a watch of its own. That reflector cannot
serve image locality: it holds only the pods of KubeSpawner's label selector
(`component=singleuser-server`) in the hub's namespace, while the room on a node depends on
every pod bound to it (user placeholders, other namespaces, daemonsets); and it keys what it
holds by `namespace/name`, which cluster-scoped objects such as nodes do not have. This is
the same loop for any list method: list, then watch from the list's resourceVersion,
re-list after an error or 410 Gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

log = logging.getLogger("jupyterhub_gpu_reclaim.spawner")


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")


class Informer:
    def __init__(self, list_method: Callable[..., Any], what: str, *, watch_timeout: int = 300,
                 request_timeout: float = 60) -> None:
        self.list_method = list_method
        self.what = what
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.resources: dict[str, dict] = {}
        self.first_load: asyncio.Future = asyncio.get_event_loop().create_future()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Start the loop and wait for the first list; raises what the first list raised."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        await asyncio.shield(self.first_load)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _list(self) -> str:
        response = await self.list_method(_preload_content=False, _request_timeout=self.request_timeout)
        body = json.loads(await response.read())
        self.resources = {_key(o): o for o in body.get("items") or []}
        if not self.first_load.done():
            self.first_load.set_result(None)
        return body["metadata"]["resourceVersion"]

    async def _run(self) -> None:
        from kubernetes_asyncio import watch

        delay = 0.5
        while True:
            try:
                version = await self._list()
                async with watch.Watch().stream(
                        self.list_method, resource_version=version, timeout_seconds=self.watch_timeout,
                        _request_timeout=self.watch_timeout + 10, _preload_content=False) as stream:
                    async for event in stream:
                        obj = event["raw_object"]
                        if event["type"] == "ERROR":  # e.g. 410 Gone: re-list
                            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                        if event["type"] == "DELETED":
                            self.resources.pop(_key(obj), None)
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self.resources[_key(obj)] = obj
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not self.first_load.done():
                    self.first_load.set_exception(e)
                    return
                log.warning("watching %s failed (%s); re-listing in %.1f s", self.what, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
