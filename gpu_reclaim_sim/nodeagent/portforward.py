"""`/portForward/{namespace}/{pod}` (`kubectl port-forward`), as a kubelet serves it. The
node declares ExtendWebSocketsToKubelet, so kube-apiserver passes kubectl's request on as
it is, in one of two forms:

- a WebSocket with the subprotocol `SPDY/3.1+portforward.k8s.io` (kubectl's first try,
  PortForwardWebsockets), its binary messages carrying a SPDY/3.1 session as one byte
  stream (client-go's TunnelingConnection): the kubelet's tunneling handler
  (apiserver's util/proxy streamtunnel);
- else (that refused, or KUBECTL_PORT_FORWARD_WEBSOCKETS=false) `Upgrade: SPDY/3.1` with
  `X-Stream-Protocol-Version: portforward.k8s.io`: after the 101 the connection is the
  SPDY session (aiohttp knows no such upgrade: the connection's bytes are taken from its
  protocol as its own WebSocket response takes them).

In the session (spdysession) kubectl opens, per connection it forwards, an error stream and a
data stream, with the headers `streamType`, `port` and `requestID`. Once both streams of a
requestID are open, the node connects to the port at the pod's address, from its own
address as its prober does, and copies both ways: the client's FIN half-closes the
connection to the pod, the pod's end of it ends the data stream. What went wrong is written
to the error stream in the kubelet's words, then both streams are closed. A pair not
complete within STREAM_CREATION_TIMEOUT_S (the kubelet's) is dropped, saying so.

A pod's own loopback is the host's here (sim.network.podnet): a server that binds only
127.0.0.1 in its pod cannot be reached, where a real pod's could.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from ..kubelet.podworker import PodWorker
from ..kubelet.probes import _why as dial_error  # a failed connection in Go's words, as the prober says it
from . import spdyframes
from .spdysession import Session, Stream, StreamReset

log = logging.getLogger("gpu_reclaim_sim.nodeagent.portforward")

PROTOCOL = "portforward.k8s.io"
TUNNEL_PREFIX = "SPDY/3.1+"  # a SPDY protocol offered as a WebSocket subprotocol
STREAM_CREATION_TIMEOUT_S = 30.0  # the kubelet's default
CONNECT_TIMEOUT_S = 10.0
READ_SIZE = 32 * 1024  # io.Copy's buffer, as the kubelet copies
READ_AHEAD = 4 << 20  # bytes of an upgraded connection read before the session is waited for


def stream_error(headers: spdyframes.Headers) -> str | None:
    """Why the kubelet refuses a stream with these headers, or None."""
    port = headers.get("port", "")
    if not port:
        return '"port" header is required'
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):  # as ParseUint(16)
        return f'unable to parse "{port}" as a port'
    if not headers.get("streamtype"):
        return '"streamType" header is required'
    if headers["streamtype"] not in ("error", "data"):
        return f'invalid stream type "{headers["streamtype"]}"'
    return None


@dataclass
class _Pair:
    request_id: str
    streams: dict[str, Stream] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class PortForward:
    """`find(namespace, pod)`: the pod's worker on this node, or None."""

    def __init__(self, find: Callable[[str, str], PodWorker | None]) -> None:
        self.find = find

    async def serve(self, request: web.Request) -> web.StreamResponse:
        ns, name, uid = request.match_info["namespace"], request.match_info["pod"], request.match_info.get("uid")
        worker = self.find(ns, name)
        if worker is None or (uid and uid != worker.uid):
            raise web.HTTPNotFound(text="pod does not exist")
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._tunnel(request, worker)
        if request.headers.get("Upgrade", "").lower() == "spdy/3.1":
            return await self._upgrade(request, worker)
        raise web.HTTPBadRequest(text="unable to upgrade: missing upgrade headers in request")

    async def _tunnel(self, request: web.Request, worker: PodWorker) -> web.StreamResponse:
        offered = [p.strip() for h in request.headers.getall("Sec-WebSocket-Protocol", []) for p in h.split(",")]
        tunneled = [p[len(TUNNEL_PREFIX):] for p in offered if p.startswith(TUNNEL_PREFIX) and p.endswith("k8s.io")]
        if not tunneled:
            raise web.HTTPBadRequest(text="unable to upgrade: no tunneling spdy protocols provided")
        _negotiate(tunneled)
        ws = web.WebSocketResponse(protocols=(TUNNEL_PREFIX + PROTOCOL,), autoping=True)
        await ws.prepare(request)
        log.info("port-forward to %s/%s: SPDY/3.1 in a WebSocket", worker.ns, worker.name)

        async def received() -> AsyncIterator[bytes]:
            async for message in ws:
                if message.type != WSMsgType.BINARY:  # what client-go's tunnel refuses too
                    raise ConnectionResetError(f"a {message.type.name} message in the tunnel")
                yield message.data

        try:
            await self._session(worker, ws.send_bytes, received())
        finally:
            await ws.close()
        return ws

    async def _upgrade(self, request: web.Request, worker: PodWorker) -> web.StreamResponse:
        _negotiate([p.strip() for h in request.headers.getall("X-Stream-Protocol-Version", []) for p in h.split(",")])
        response = web.StreamResponse(status=101, headers={
            "Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": PROTOCOL})
        response.force_close()
        writer = await response.prepare(request)
        transport = request.protocol.transport
        if writer is None or transport is None:
            raise ConnectionResetError("the connection is gone")
        log.info("port-forward to %s/%s: SPDY/3.1 upgrade", worker.ns, worker.name)

        async def send(data: bytes) -> None:
            if transport.is_closing():
                raise ConnectionResetError("the connection is closed")
            transport.write(data)
            await writer.drain()

        incoming = _Incoming(transport)
        request.protocol.keep_alive(False)
        request.protocol.set_parser(incoming)  # type: ignore[arg-type]  # (typed for its WebSocket reader)
        try:
            await self._session(worker, send, incoming)
        finally:
            transport.close()
        return response

    async def _session(self, worker: PodWorker, send: Callable[[bytes], Awaitable[None]],
                       received: AsyncIterator[bytes]) -> None:
        """The SPDY session on a connection, until the client ends it, breaks it, or it breaks."""
        forwarding = _Forwarding(self.find, worker, send)
        try:
            async for data in received:
                await forwarding.session.receive(data)
        except (spdyframes.SessionError, ConnectionError) as e:
            log.warning("port-forward to %s/%s: %s", worker.ns, worker.name, e)
        except Exception:  # nothing a client sends may take the node down
            log.exception("port-forward to %s/%s failed", worker.ns, worker.name)
        finally:
            await forwarding.end()


def _negotiate(offered: list[str]) -> None:
    """Refuse a client that offers protocols, none of them this node's (httpstream.Handshake)."""
    if offered and PROTOCOL not in offered:
        raise web.HTTPForbidden(text=f"unable to upgrade: unable to negotiate protocol: client supports {offered}, "
                                     f"server accepts {[PROTOCOL]}")


class _Incoming:
    """An upgraded connection's bytes, as aiohttp's protocol hands them to a payload
    parser (`feed_data`, `feed_eof`); reading stops while READ_AHEAD of them wait."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._held, self._transport, self._paused = 0, transport, False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._queue.put_nowait(bytes(data))
        self._held += len(data)
        if self._held > READ_AHEAD and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self._queue.put_nowait(b"")

    def __aiter__(self) -> _Incoming:
        return self

    async def __anext__(self) -> bytes:
        data = await self._queue.get()
        self._held -= len(data)
        if self._paused and self._held <= READ_AHEAD // 2 and not self._transport.is_closing():
            self._paused = False
            self._transport.resume_reading()
        if not data:
            raise StopAsyncIteration
        return data


class _Forwarding:
    """One port-forward session: its streams paired by requestID, each pair forwarded."""

    def __init__(self, find: Callable[[str, str], PodWorker | None], worker: PodWorker,
                 send: Callable[[bytes], Awaitable[None]]) -> None:
        self.find, self.worker = find, worker
        self.session = Session(send, self._refused, self._opened)
        self.pairs: dict[str, _Pair] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def _refused(self, headers: spdyframes.Headers) -> str | None:
        reason = stream_error(headers)
        if reason:
            log.warning("port-forward to %s/%s: stream rejected: %s", self.worker.ns, self.worker.name, reason)
        return reason

    def _opened(self, stream: Stream) -> None:
        kind = stream.headers["streamtype"]
        # without requestID (clients before 1.6): the pair's streams are consecutive, error first
        request_id = stream.headers.get("requestid") or str(stream.id - (2 if kind == "data" else 0))
        pair = self.pairs.get(request_id)
        if pair is None:
            pair = self.pairs[request_id] = _Pair(request_id)
            pair.timer = asyncio.get_running_loop().call_later(STREAM_CREATION_TIMEOUT_S, self._timed_out, pair)
        if kind in pair.streams:
            self._spawn(self._fail(pair, f"error processing stream for request {request_id}: "
                                         f"{kind} stream already assigned", stream))
            return
        pair.streams[kind] = stream
        if len(pair.streams) == 2:
            self._drop(pair)
            self._spawn(self._forward(pair))

    def _timed_out(self, pair: _Pair) -> None:
        self._spawn(self._fail(pair, f"(conn={id(self)}, request={pair.request_id}) timed out waiting for streams"))

    def _drop(self, pair: _Pair) -> None:
        if pair.timer is not None:
            pair.timer.cancel()
        self.pairs.pop(pair.request_id, None)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _fail(self, pair: _Pair, message: str, duplicate: Stream | None = None) -> None:
        self._drop(pair)
        log.warning("port-forward to %s/%s: %s", self.worker.ns, self.worker.name, message)
        await _finish(pair.streams.get("error"), message, pair.streams.get("data"))
        if duplicate is not None:
            await _finish(None, None, duplicate)

    async def _forward(self, pair: _Pair) -> None:
        data, error = pair.streams["data"], pair.streams["error"]
        port = int(data.headers["port"])
        worker = self.find(self.worker.ns, self.worker.name)
        message = None
        try:
            if worker is not self.worker or not worker.ip:
                raise ConnectionRefusedError(f"pod {self.worker.ns}/{self.worker.name} is not running on this node")
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    worker.ip, port, local_addr=(worker.kubelet.address, 0)), CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as e:
                raise ConnectionRefusedError(f"dial tcp4 {worker.ip}:{port}: {dial_error(e)}") from None
            try:
                await _copy(reader, writer, data)
            finally:
                writer.close()
        except ConnectionRefusedError as e:
            message = f"error forwarding port {port} to pod {self.worker.uid}, uid : {e}"
            log.info("port-forward to %s/%s: %s", self.worker.ns, self.worker.name, message)
        except Exception:  # nothing a client sends may take the node down
            log.exception("port-forward to %s/%s failed", self.worker.ns, self.worker.name)
            message = "an internal error occurred"
        await _finish(error, message, data)

    async def end(self) -> None:
        """The connection is gone: every stream and forwarding ends."""
        for pair in list(self.pairs.values()):
            self._drop(pair)
        self.session.end()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stream: Stream) -> None:
    """Both ways until the pod ends its side (or the stream is reset): the client's data to the
    pod, then its FIN as a half-close; the pod's to the client."""

    async def upstream() -> None:
        while data := await stream.read():
            writer.write(data)
            await writer.drain()
        if stream.was_reset:  # the client is gone: so is the connection to the pod
            writer.close()
        elif writer.can_write_eof():
            writer.write_eof()

    sending = asyncio.create_task(upstream())
    try:
        while data := await reader.read(READ_SIZE):
            await stream.write(data)
    except (ConnectionError, StreamReset) as e:
        log.debug("port-forward stream %d: %s", stream.id, e)
    finally:
        stream.discard()
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)


async def _finish(error: Stream | None, message: str | None, data: Stream | None) -> None:
    """The kubelet's end of a pair: its message (if any) on the error stream, then both closed."""
    try:
        if data is not None:
            data.discard()
            await data.close()
        if error is not None:
            if message:
                await error.write(message.encode())
            await error.close()
    except (ConnectionError, StreamReset):
        pass  # the client or the connection is gone: nobody to tell
