"""Pod logs (`pods/log`): which container a log request reads, why a log is missing in the
apiserver's words, reading a log, its tail, and following it as it grows."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import errors
from .discovery import Target
from .httpio import _client_gone, _int_param
from ..kubelet.containerlogs import container_state, no_previous, not_started, read_log, tail
from ..rbac.authorizer import TRUE
from ..resources import BY_KIND
from ..store import Obj

log = logging.getLogger("gpu_reclaim_sim.apiserver.podlogs")

LOG_POLL_INTERVAL = 0.2


class PodLogs:
    """`PodLogs(cluster, stopping)`: `serve` answers a request for a pod's log, read from
    where the cluster's runtime writes it (`cluster.pod_log_path`); a follower ends when
    `stopping` is set."""

    def __init__(self, cluster: Any, stopping: asyncio.Event) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self._stopping = stopping

    async def serve(self, request: web.Request, t: Target) -> web.StreamResponse:
        pod = self.store.get(t.rtype, t.namespace, t.name)
        container = _log_container(pod, request.query.get("container"))
        previous = request.query.get("previous") in TRUE
        path = Path(self.cluster.pod_log_path(t.namespace, t.name, container, previous=previous))
        whole = await asyncio.to_thread(read_log, path)
        if previous:
            if whole is None:
                raise errors.bad_request(no_previous(pod, container))
            return web.Response(body=tail(whole, _int_param(request.query, "tailLines"),
                                           _int_param(request.query, "limitBytes")),
                                headers={"Content-Type": "text/plain"})
        if whole is None:
            _explain_missing_log(pod, container)
            whole = b""
        text = tail(whole, _int_param(request.query, "tailLines"), _int_param(request.query, "limitBytes"))
        if request.query.get("follow") not in TRUE:
            return web.Response(body=text, headers={"Content-Type": "text/plain"})
        return await self._follow(request, pod, container, path, text, len(whole))

    async def _follow(self, request: web.Request, pod: Obj, container: str, path: Path, first: bytes,
                      offset: int) -> web.StreamResponse:
        """Stream the log as it grows, until the container ends or the pod goes."""
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(first)
            await self._follow_file(request, response, pod, container, path, offset)
            if not _client_gone(request):
                await response.write_eof()
        except ConnectionResetError:
            log.debug("log follower went away: %s", request.path_qs)
        return response

    async def _follow_file(self, request: web.Request, response: web.StreamResponse, pod: Obj,
                           container: str, path: Path, offset: int) -> None:
        """Send what is written after `offset` (where the first read ended: nothing
        written meanwhile is lost)."""
        meta = pod["metadata"]
        while not self._stopping.is_set() and not _client_gone(request):
            data = await asyncio.to_thread(read_log, path, offset) or b""
            offset += len(data)
            if data:
                await response.write(data)
            current = self.store.find(BY_KIND["Pod"], meta.get("namespace"), meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"] or _terminated(current, container):
                if not data:  # ended, and everything it wrote has been sent
                    return
                continue
            try:
                await asyncio.wait_for(self._stopping.wait(), LOG_POLL_INTERVAL)
            except asyncio.TimeoutError:
                pass


def _log_container(pod: Obj, requested: str | None) -> str:
    spec = pod.get("spec") or {}
    names = [c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
             for c in spec.get(key) or []]
    name = pod["metadata"]["name"]
    if requested:
        if requested not in names:
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    main = [c.get("name") for c in spec.get("containers") or []]
    if len(main) == 1:
        return main[0]
    raise errors.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                             f"[{' '.join(main)}]")


def _explain_missing_log(pod: Obj, container: str) -> None:
    """No log file yet: answer what the kubelet would, or carry on with an empty log."""
    name = pod["metadata"]["name"]
    if not (pod.get("spec") or {}).get("nodeName"):
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    waiting = not_started(pod, container)
    if waiting:
        raise errors.bad_request(waiting)


def _terminated(pod: Obj, container: str) -> bool:
    state = container_state(pod, container) or {}
    return bool(state.get("terminated")) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
