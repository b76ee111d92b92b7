"""`pods/exec` and `pods/attach` over the websocket channel protocol, as the API server
serves them to kubectl (≥ 1.30), the `kubernetes` client's `stream()` and
kubernetes_asyncio's WsApiClient.

The request (GET or POST, upgraded to a websocket) names the container and the streams
in its query: `command` (repeated; exec only), `container`, `stdin`, `stdout`, `stderr`,
`tty`. The channel protocol is sim.kubelet.remotecommand's.

A request that cannot be served is refused before the upgrade, in the API's words: the
pod not found (404), a container it does not have, no command, no stream, not a
websocket, no node assigned (400), the container not running (404, the kubelet's
`container not found`). Authorization: `create` on `pods/exec` (`pods/attach`); a GET
(what websocket clients send) is authorized as `get` like any GET and, since Kubernetes
1.35 (KEP-4006), also as `create`.

Exec runs the command in the container (sim.containerexec); attach streams what the
container writes from then on (its log, stdout and stderr as one stream, as the runtime
records them) until it ends. A container's own stdin is never open in the simulator
(`stdin: true` in a pod spec is not honoured), so attach reads no input."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import errors
from ..kubelet import containerexec
from ..kubelet.remotecommand import PROTOCOLS, STDERR, STDOUT, SUCCESS, Channels, failure, run_exec
from .discovery import Target
from .httpio import USER
from .podlogs import PodLogs, _log_container
from ..rbac.authorizer import TRUE, Attributes, Authorizer
from ..store import Obj

log = logging.getLogger("gpu_reclaim_sim.podexec")

@dataclass
class Request:
    """What an exec or attach request asks for."""

    container: str
    command: list[str]
    streams: containerexec.Streams


def _options(pod: Obj, query: Any, attach: bool) -> Request:
    """PodExecOptions / PodAttachOptions from the query, checked as the API server does."""
    container = _log_container(pod, query.get("container"))
    command = [] if attach else list(query.getall("command", []))
    if not attach and not command:
        raise errors.bad_request("you must specify at least one command for the container")
    flags = {k: query.get(k) in TRUE for k in ("stdin", "stdout", "stderr", "tty")}
    for k in ("stdout", "stderr"):  # the options' defaults
        flags[k] = flags[k] or k not in query
    if flags["tty"]:
        flags["stderr"] = False  # a terminal is one stream
    if not (flags["stdin"] or flags["stdout"] or flags["stderr"]):
        raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    return Request(container, command, containerexec.Streams(**flags))


class PodExec:
    """`PodExec(cluster, authorizer, logs)`: `serve` answers `pods/exec` and `pods/attach`."""

    def __init__(self, cluster: Any, authorizer: Authorizer, logs: PodLogs) -> None:
        self.cluster = cluster
        self.authorizer = authorizer
        self.logs = logs

    async def serve(self, request: web.Request, t: Target) -> web.StreamResponse:
        attach = t.subresource == "attach"
        if request.method == "GET":  # the websocket upgrade's synthetic check (KEP-4006, 1.35)
            self.authorizer.check(Attributes(request[USER], "create", True, request.path, t.namespace or "", "",
                                             "v1", "pods", t.subresource or "", t.name or ""))
        pod = self.cluster.store.get(t.rtype, t.namespace, t.name)
        options = _options(pod, request.query, attach)
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(f"pod {t.name} does not have a host assigned")
        container = self._running(pod, options.container)
        ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True)
        if not ws.can_prepare(request).ok:
            raise errors.bad_request("Upgrade request required")
        await ws.prepare(request)
        if not ws.ws_protocol:
            await ws.close(message=f"requested protocol(s) are not supported; supports {list(PROTOCOLS)}".encode())
            return ws
        channels = Channels(ws)
        try:
            if attach:
                await self._attach(request, channels, pod, options)
            else:
                await run_exec(channels, container, options.command, options.streams)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # nothing a client sends may take the server down
            log.exception("exec into %s/%s failed", t.namespace, t.name)
            await channels.finish(failure(f"Internal error occurred: {e}"))
        return ws

    def _running(self, pod: Obj, container: str) -> Any:
        """The container's process on its node; the kubelet's 404 when it is not running."""
        kubelet = getattr(self.cluster, "kubelets", {}).get(pod["spec"]["nodeName"])
        worker = kubelet.workers.get(pod["metadata"]["uid"]) if kubelet is not None else None
        proc = worker.procs.get(container) if worker is not None else None
        if proc is None or proc.returncode is not None:
            raise errors.ApiError(404, f'container not found ("{container}")', reason="NotFound")
        return proc

    async def _attach(self, request: web.Request, channels: Channels, pod: Obj, options: Request) -> None:
        """The container's output from now on, until it ends or the client goes."""
        meta = pod["metadata"]
        path = Path(self.cluster.pod_log_path(meta["namespace"], meta["name"], options.container))
        offset = await asyncio.to_thread(_size, path)
        out = STDOUT if options.streams.stdout else STDERR
        sink = _ChannelWriter(channels, out if options.streams.stdout or options.streams.stderr else None)
        reading = asyncio.create_task(self._discard(channels))
        try:
            await self.logs._follow_file(request, sink, pod, options.container, path,  # type: ignore[arg-type]
                                         offset)  # (it only writes)
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        await channels.finish(SUCCESS)

    async def _discard(self, channels: Channels) -> None:
        async for _ in channels.ws:  # the container's stdin is never open: input goes nowhere
            pass


class _ChannelWriter:
    """What the log follower writes to, sent on one channel (or dropped: no output asked for)."""

    def __init__(self, channels: Channels, channel: int | None) -> None:
        self.channels = channels
        self.channel = channel

    async def write(self, data: bytes) -> None:
        if self.channel is not None:
            await self.channels.send(self.channel, data)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
