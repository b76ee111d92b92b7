"""Objects of one kind as a client-go informer sees them (`ListWatch`): a list, then a watch from
the list's resourceVersion, resumed from the last one it saw (bookmarks included) when the server ends it
(every few minutes, `timeout_seconds`) or the connection drops, and a new list when the server
answers 410 Gone (that version compacted away). After a new list, pods the watch missed the
deletion of are handed on as DELETED, as the informer's Replace does.

`PodWatch`: the pods bound to one node, as a kubelet's informer sees them (field selector
`spec.nodeName=<node>`, all the Node authorizer lets a node list). sim.nodeagent.nodeservices
follows Services, EndpointSlices and the rest with a `ListWatch` each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..objects import Obj

log = logging.getLogger("gpu_reclaim_sim.nodeagent.podwatch")

WATCH_TIMEOUT_S = (300, 600)  # the reflector's minWatchTimeout and twice it: a random length between
RETRY_S = 1.0


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class ListWatch:
    """`list_call` (a kubernetes_asyncio list method, with `params`: selectors) listed, then
    watched; each change handed to `handle(type, object)`. `what` names it in the log."""

    def __init__(self, list_call: Callable[..., Any], what: str, handle: Callable[[str, Obj], None],
                 **params: Any) -> None:
        self.list_call, self.what, self.params = list_call, what, params
        self.handle = handle
        self.known: dict[str, Obj] = {}  # uid -> the object as last seen
        self.lists = 0  # how many lists it made (the first, then one per 410)

    async def run(self) -> None:
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
            except Gone:
                log.info("%s: watch expired (410 Gone): listing again", self.what)
                version = None
            except (ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
                log.warning("%s: watching: %s", self.what, e)
                await asyncio.sleep(RETRY_S)

    async def _list(self) -> str:
        response: Any = await self.list_call(_preload_content=False, **self.params)
        listing = await _json(response)
        self.lists += 1
        objects = {o["metadata"]["uid"]: o for o in listing.get("items") or []}
        for uid in [u for u in self.known if u not in objects]:
            self._deliver("DELETED", self.known[uid])
        for uid, obj in objects.items():
            self._deliver("MODIFIED" if uid in self.known else "ADDED", obj)
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, version: str) -> str:
        """Follow the watch from `version` until the server ends it; the last version seen."""
        response: Any = await self.list_call(
            watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=random.randint(*WATCH_TIMEOUT_S), _preload_content=False, **self.params)
        try:
            if response.status == 410:
                raise Gone()
            if response.status != 200:
                raise ApiException(status=response.status, reason=await response.text())
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self._deliver(event["type"], obj)
        finally:
            response.release()
        return version

    def _deliver(self, type_: str, obj: Obj) -> None:
        uid = obj["metadata"]["uid"]
        if type_ == "DELETED":
            self.known.pop(uid, None)
        else:
            self.known[uid] = obj
        self.handle(type_, obj)


class PodWatch(ListWatch):
    def __init__(self, api: k8s.ApiClient, node: str, handle: Callable[[str, Obj], None]) -> None:
        super().__init__(k8s.CoreV1Api(api).list_pod_for_all_namespaces, f"node {node}: its pods", handle,
                         field_selector=f"spec.nodeName={node}")
        self.node = node


async def _json(response: Any) -> Obj:
    try:
        if response.status != 200:
            raise ApiException(status=response.status, reason=await response.text())
        return await response.json()
    finally:
        response.release()
