"""A node's kubelet API over HTTPS, the one the API server proxies `kubectl logs`, `exec`,
`attach` and `port-forward` to: at the node's InternalIP, on a port of its own (chosen when
it binds, then advertised in the Node's `status.daemonEndpoints.kubeletEndpoint`), with a
serving certificate from the run's CA for that address (the API server checks it with
`--kubelet-certificate-authority`) and clients' certificates checked against the same CA and
authorized as the kubelet does (`kubeletauth`)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

from aiohttp import web
from kubernetes_asyncio import client as k8s

from ..controlplane.credentials import Authority
from ..kubelet.podworker import PodWorker
from .kubeletlogs import ContainerLogs
from .containerstreams import FEATURE, ContainerStreams
from .kubeletauth import Authorizer
from .portforward import PortForward

STOP_S = 1.0


class KubeletServer:
    """`find(namespace, pod)`: the worker of a pod on this node; `api`: the node's client;
    `features`: what its Node declares for what it serves."""

    features = (FEATURE,)

    def __init__(self, name: str, address: str, authority: Authority, api: k8s.ApiClient,
                 find: Callable[[str, str], PodWorker | None]) -> None:
        self.name, self.address, self.authority = name, address, authority
        self.port = 0
        app = web.Application(middlewares=[Authorizer(api, name).middleware])
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", ContainerLogs(find).serve)
        streams, forward = ContainerStreams(find), PortForward(find)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/exec/{namespace}/{pod}/{container}", streams.exec)
            app.router.add_route(method, "/attach/{namespace}/{pod}/{container}", streams.attach)
            for path in ("/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"):
                app.router.add_route(method, path, forward.serve)
        # stopping, a follower or an exec still open is cut after a second, not aiohttp's 60
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_S)

    def _tls(self) -> ssl.SSLContext:
        serving = self.authority.issue(f"kubelet-{self.name}", f"system:node:{self.name}", ("system:nodes",),
                                       server_names=(self.address, self.name))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.authority.cert))
        context.load_cert_chain(serving.cert, serving.key)
        context.verify_mode = ssl.CERT_OPTIONAL  # none: 401, as the kubelet answers an anonymous request
        return context

    async def start(self) -> int:
        """Listen; the port it got."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.address, 0))
        self.port = sock.getsockname()[1]
        await self._runner.setup()
        await web.SockSite(self._runner, sock, ssl_context=self._tls()).start()
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()
