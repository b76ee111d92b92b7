"""`GET /containerLogs/{namespace}/{pod}/{container}`: a container's log as the kubelet
serves it to the API server for `kubectl logs` (pods/log), with the PodLogOptions the API
server passes on in the query: `follow` (streamed as the container writes, until it ends),
`previous` (its run before the last restart), `tailLines`, `limitBytes`. `timestamps`,
`sinceSeconds` and `sinceTime` are refused (400): the runtime writes a container's output to
its log file as it comes, with no time per line to select or show."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import BinaryIO

from aiohttp import web

from ..kubelet.containerlogs import no_previous, not_started, tail
from ..kubelet.podworker import PodWorker

log = logging.getLogger("gpu_reclaim_sim.nodeagent.kubeletlogs")

POLL_S = 0.2  # how often a follower looks for more output
READ_SIZE = 64 * 1024
TRUE = ("1", "t", "T", "true", "TRUE", "True")  # Go's strconv.ParseBool, as the API's query codec reads it
UNSUPPORTED = ("timestamps", "sinceSeconds", "sinceTime")


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "") in TRUE


def _number(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f'{name}: invalid value "{value}": not an integer') from None


class ContainerLogs:
    """`ContainerLogs(find)`: `find(namespace, pod)` is the pod's worker on this node, or None."""

    def __init__(self, find: Callable[[str, str], PodWorker | None]) -> None:
        self.find = find

    async def serve(self, request: web.Request) -> web.StreamResponse:
        ns, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        asked = [k for k in UNSUPPORTED if k in request.query and not (k == "timestamps" and not _flag(request, k))]
        if asked:
            raise web.HTTPBadRequest(text=f"{', '.join(asked)}: not supported by this node: its container logs "
                                          "record no time per line")
        lines, limit = _number(request, "tailLines"), _number(request, "limitBytes")
        if (lines is not None and lines < 0) or (limit is not None and limit < 1):
            raise web.HTTPUnprocessableEntity(text="tailLines must be >= 0, limitBytes >= 1")
        worker = self.find(ns, name)
        if worker is None:
            raise web.HTTPNotFound(text=f'pod "{ns}/{name}" not found')
        spec = worker.pod.get("spec") or {}
        if container not in {c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
                             for c in spec.get(key) or []}:
            raise web.HTTPNotFound(text=f'container "{container}" not found in pod "{ns}/{name}"')
        previous = _flag(request, "previous")
        path = worker.cluster.pod_log_path(ns, name, container, previous=previous)
        running = None if previous else worker.procs.get(container)
        try:
            f = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError:
            f = None
        try:
            if f is None:
                waiting = no_previous(worker.pod, container) if previous else not_started(worker.pod, container)
                if waiting:
                    raise web.HTTPBadRequest(text=waiting)
            first = tail(await asyncio.to_thread(f.read) if f else b"", lines, limit)
            if not _flag(request, "follow") or previous or f is None:
                return web.Response(body=first, content_type="text/plain")
            return await self._follow(request, worker, container, running, f, first, limit)
        finally:
            if f is not None:
                f.close()

    async def _follow(self, request: web.Request, worker: PodWorker, container: str, running: object,
                      f: BinaryIO, first: bytes, limit: int | None) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(first)
            if limit is None or len(first) < limit:
                await follow(self.find, worker, container, running, f, response.write,
                             None if limit is None else limit - len(first))
            await response.write_eof()
        except ConnectionResetError:
            log.debug("log follower went away: %s", request.path)
        return response


async def follow(find: Callable[[str, str], PodWorker | None], worker: PodWorker, container: str, running: object,
                 f: BinaryIO, write: Callable[[bytes], Awaitable[None]], limit: int | None = None) -> None:
    """Write what the container writes from here on (read from the file it had open: a
    restart moves it aside), until that run of it (`running`) ends and all it wrote is
    written, the pod goes, or `limit` bytes are written."""
    while limit is None or limit > 0:
        data = await asyncio.to_thread(f.read, READ_SIZE if limit is None else min(limit, READ_SIZE))
        if data:
            await write(data)
            limit = None if limit is None else limit - len(data)
            continue
        proc = worker.procs.get(container)
        if running is None or proc is not running or getattr(proc, "returncode", None) is not None \
                or find(worker.ns, worker.name) is not worker:
            return
        await asyncio.sleep(POLL_S)
