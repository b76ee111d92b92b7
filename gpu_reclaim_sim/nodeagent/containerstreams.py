"""`/exec/{namespace}/{pod}/{container}`: a command in a running container, as a kubelet with
ExtendWebSocketsToKubelet (beta, on by default since 1.36) serves it: the node declares the
feature (Node `status.declaredFeatures`), so kube-apiserver proxies kubectl's WebSocket
(`v5.channel.k8s.io`) to it as it is, instead of translating it to SPDY. The API server
passes the PodExecOptions on as the kubelet's query: `command` (repeated), `input`,
`output`, `error`, `tty` ("1" when asked for). The channel protocol and the command's run
are sim.kubelet.remotecommand's (the command joins the container's namespaces: containerexec)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from ..kubelet import containerexec, remotecommand
from ..kubelet.podworker import PodWorker

log = logging.getLogger("gpu_reclaim_sim.nodeagent.containerstreams")

FEATURE = "ExtendWebSocketsToKubelet"  # what the node declares for it
TRUE = ("1", "true", "True")


class ContainerStreams:
    """`find(namespace, pod)`: the pod's worker on this node, or None."""

    def __init__(self, find: Callable[[str, str], PodWorker | None]) -> None:
        self.find = find

    async def exec(self, request: web.Request) -> web.StreamResponse:
        ns, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        worker = self.find(ns, name)
        proc = worker.procs.get(container) if worker is not None else None
        if proc is None or proc.returncode is not None:
            raise web.HTTPNotFound(text=f'container not found ("{container}")')
        command = request.query.getall("command", [])
        if not command:
            raise web.HTTPBadRequest(text="you must specify at least one command for the container")
        flags = {k: request.query.get(k, "") in TRUE for k in ("input", "output", "error", "tty")}
        streams = containerexec.Streams(stdin=flags["input"], stdout=flags["output"],
                                        stderr=flags["error"] and not flags["tty"], tty=flags["tty"])
        if not (streams.stdin or streams.stdout or streams.stderr):
            raise web.HTTPBadRequest(text="you must specify at least 1 of stdin, stdout, stderr")
        ws = web.WebSocketResponse(protocols=remotecommand.PROTOCOLS, autoping=True)
        if not ws.can_prepare(request).ok:
            raise web.HTTPBadRequest(text="Upgrade request required: this node speaks "
                                          f"{', '.join(remotecommand.PROTOCOLS)} over a WebSocket only")
        await ws.prepare(request)
        if not ws.ws_protocol:
            await ws.close(message=f"requested protocol(s) are not supported; supports "
                                   f"{list(remotecommand.PROTOCOLS)}".encode())
            return ws
        channels = remotecommand.Channels(ws)
        try:
            await remotecommand.run_exec(channels, proc, command, streams)
        except Exception as e:  # nothing a client sends may take the node down
            log.exception("exec into %s/%s failed", ns, name)
            await channels.finish(remotecommand.failure(f"Internal error occurred: {e}"))
        return ws
