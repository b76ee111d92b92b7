"""`/exec/{namespace}/{pod}/{container}` (a command in a running container) and
`/attach/{namespace}/{pod}/{container}` (what it writes from now on), as a kubelet with
ExtendWebSocketsToKubelet (beta, on by default since 1.36) serves them: the node declares the
feature (Node `status.declaredFeatures`), so kube-apiserver proxies kubectl's WebSocket
(`v5.channel.k8s.io`) to it as it is, instead of translating it to SPDY. The API server
passes the PodExecOptions (PodAttachOptions) on as the kubelet's query: `command` (repeated;
exec only), `input`, `output`, `error`, `tty` ("1" when asked for). The channel protocol and
the command's run are sim.kubelet.remotecommand's (the command joins the container's
namespaces: sim.kubelet.containerexec)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..kubelet import containerexec, remotecommand
from ..kubelet.podworker import PodWorker
from .kubeletlogs import TRUE, follow

log = logging.getLogger("gpu_reclaim_sim.nodeagent.containerstreams")

FEATURE = "ExtendWebSocketsToKubelet"  # what the node declares for it


class ContainerStreams:
    """`find(namespace, pod)`: the pod's worker on this node, or None."""

    def __init__(self, find: Callable[[str, str], PodWorker | None]) -> None:
        self.find = find

    def _target(self, request: web.Request) -> tuple[PodWorker, Any, containerexec.Streams]:
        """The pod's worker, its running container and the streams asked for; refused, in
        the kubelet's words, before the upgrade."""
        ns, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        worker = self.find(ns, name)
        proc = worker.procs.get(container) if worker is not None else None
        if worker is None or proc is None or proc.returncode is not None:
            raise web.HTTPNotFound(text=f'container not found ("{container}")')
        flags = {k: request.query.get(k, "") in TRUE for k in ("input", "output", "error", "tty")}
        streams = containerexec.Streams(stdin=flags["input"], stdout=flags["output"],
                                        stderr=flags["error"] and not flags["tty"], tty=flags["tty"])
        if not (streams.stdin or streams.stdout or streams.stderr):
            raise web.HTTPBadRequest(text="you must specify at least 1 of stdin, stdout, stderr")
        return worker, proc, streams

    async def _upgrade(self, request: web.Request) -> remotecommand.Channels:
        """The WebSocket, in the first of the client's protocols this node speaks; closed,
        saying so, when it speaks none of them."""
        ws = web.WebSocketResponse(protocols=remotecommand.PROTOCOLS, autoping=True)
        if not ws.can_prepare(request).ok:
            raise web.HTTPBadRequest(text="Upgrade request required: this node speaks "
                                          f"{', '.join(remotecommand.PROTOCOLS)} over a WebSocket only")
        await ws.prepare(request)
        if not ws.ws_protocol:
            await ws.close(message=f"requested protocol(s) are not supported; supports "
                                   f"{list(remotecommand.PROTOCOLS)}".encode())
        return remotecommand.Channels(ws)

    async def exec(self, request: web.Request) -> web.StreamResponse:
        worker, proc, streams = self._target(request)
        command = request.query.getall("command", [])
        if not command:
            raise web.HTTPBadRequest(text="you must specify at least one command for the container")
        channels = await self._upgrade(request)
        if channels.ws.closed:
            return channels.ws
        try:
            await remotecommand.run_exec(channels, proc, command, streams)
        except Exception as e:  # nothing a client sends may take the node down
            log.exception("exec into %s/%s failed", worker.ns, worker.name)
            await channels.finish(remotecommand.failure(f"Internal error occurred: {e}"))
        return channels.ws

    async def attach(self, request: web.Request) -> web.StreamResponse:
        """What the container writes from now on (stdout and stderr as one stream, as its
        log has them), until it ends or the client goes; its own stdin is never open."""
        worker, proc, streams = self._target(request)
        container = request.match_info["container"]
        path = worker.cluster.pod_log_path(worker.ns, worker.name, container)
        channels = await self._upgrade(request)
        if channels.ws.closed:
            return channels.ws
        out = remotecommand.STDOUT if streams.stdout else remotecommand.STDERR if streams.stderr else None

        async def write(data: bytes) -> None:
            if out is not None:
                await channels.send(out, data)

        try:
            f = path.open("rb")  # noqa: ASYNC230 - opening reads nothing
        except FileNotFoundError:  # moved aside by a restart just now: that run has ended
            await channels.finish(remotecommand.SUCCESS)
            return channels.ws
        with f:
            f.seek(0, 2)
            tasks = [asyncio.create_task(follow(self.find, worker, container, proc, f, write)),
                     asyncio.create_task(_until_closed(channels))]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        await channels.finish(remotecommand.SUCCESS)
        return channels.ws


async def _until_closed(channels: remotecommand.Channels) -> None:
    async for _ in channels.ws:  # input goes nowhere: the container's stdin is never open
        pass
