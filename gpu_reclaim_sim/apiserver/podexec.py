"""`pods/exec` and `pods/attach` over the websocket channel protocol, as the API server
serves them to kubectl (≥ 1.30), the `kubernetes` client's `stream()` and
kubernetes_asyncio's WsApiClient.

The request (GET or POST, upgraded to a websocket) names the container and the streams
in its query: `command` (repeated; exec only), `container`, `stdin`, `stdout`, `stderr`,
`tty`. The subprotocol is `v5.channel.k8s.io` or `v4.channel.k8s.io` (the client's
first that the server speaks); every message is binary, its first byte the channel: 0
stdin (client to server), 1 stdout, 2 stderr, 3 the outcome (a `Status`: Success, or for
a non-zero exit code reason `NonZeroExitCode` with the code in `details.causes`
`ExitCode`), 4 a terminal's size (`{"Width": w, "Height": h}`). v5 adds the close signal:
a message `255, channel` from the client closes that stream (its stdin: end of input).

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
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from .. import errors
from ..kubelet import containerexec, runtime
from .discovery import Target
from .httpio import USER
from .podlogs import PodLogs, _log_container
from ..rbac.authorizer import TRUE, Attributes, Authorizer
from ..store import Obj

log = logging.getLogger("gpu_reclaim_sim.podexec")

V4, V5 = "v4.channel.k8s.io", "v5.channel.k8s.io"
PROTOCOLS = (V5, V4)
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
READ_SIZE = 32 * 1024
SUCCESS: dict[str, Any] = {"metadata": {}, "status": "Success"}


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


def exit_status(code: int, command: list[str]) -> dict[str, Any]:
    """The outcome on the error channel for a command that ended with `code`."""
    if code == 0:
        return SUCCESS
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {_go_list(command)}, "
                       f"exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def failure(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError",
            "details": {"causes": [{"message": message}]}, "code": 500}


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


class Channels:
    """The server's end of one channel-protocol websocket."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.v5 = ws.ws_protocol == V5
        self._lock = asyncio.Lock()

    async def send(self, channel: int, data: bytes) -> None:
        if self.ws.closed:
            return
        async with self._lock:
            try:
                await self.ws.send_bytes(bytes([channel]) + data)
            except (ConnectionError, RuntimeError):  # the client went
                pass

    async def finish(self, status: dict[str, Any]) -> None:
        await self.send(ERROR, json.dumps(status).encode())
        await self.ws.close()


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
                await self._exec(channels, container, options)
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

    async def _exec(self, channels: Channels, container: Any, options: Request) -> None:
        if not isinstance(container, runtime.ContainerProcess):  # stub mode: no process to join
            await channels.finish(failure(
                "Internal error occurred: error executing command in container: the container has no "
                "processes (stub mode)"))
            return
        try:
            process = await containerexec.start(container, options.command, options.streams)
        except containerexec.ExecError as e:
            await channels.finish(failure(
                f"Internal error occurred: error executing command in container: failed to exec in container: "
                f"OCI runtime exec failed: exec failed: unable to start container process: {e}: unknown"))
            return
        pumps = [asyncio.create_task(self._pump(channels, reader, channel))
                 for reader, channel in ((process.stdout, STDOUT), (process.stderr, STDERR)) if reader is not None]
        reading = asyncio.create_task(self._read_client(channels, process))
        try:
            code = await process.wait()
            await asyncio.gather(*pumps)
            await channels.finish(exit_status(code, options.command))
        finally:
            process.kill()  # the client went first: what it started ends with its stream
            for task in pumps + [reading]:
                task.cancel()
            await asyncio.gather(*pumps, reading, return_exceptions=True)
            process.close()

    async def _pump(self, channels: Channels, reader: asyncio.StreamReader, channel: int) -> None:
        while True:
            try:
                data = await reader.read(READ_SIZE)
            except OSError:  # the stream broke (a terminal's end reads as end of file)
                return
            if not data:
                return
            await channels.send(channel, data)

    async def _read_client(self, channels: Channels, process: containerexec.ExecProcess) -> None:
        """What the client sends: stdin, a terminal's size, v5's close of stdin; the
        connection's end closes stdin too."""
        async for msg in channels.ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == STDIN:
                await process.write(payload)
            elif channel == RESIZE:
                size = _terminal_size(payload)
                if size is not None:
                    process.resize(*size)
            elif channel == CLOSE and channels.v5 and payload[:1] == bytes([STDIN]):
                process.close_stdin()
        process.close_stdin()

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


def _terminal_size(payload: bytes) -> tuple[int, int] | None:
    try:
        size = json.loads(payload)
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return None
    return (width, height) if 0 <= width < 2**16 and 0 <= height < 2**16 else None
