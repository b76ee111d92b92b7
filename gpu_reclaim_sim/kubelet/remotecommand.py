"""The channel protocol of exec and attach over a WebSocket (`v5.channel.k8s.io`,
`v4.channel.k8s.io`), as the API server speaks it to kubectl and, since Kubernetes 1.36
(ExtendWebSocketsToKubelet), a kubelet speaks it to the API server: every message is binary,
its first byte the channel: 0 stdin (client to server), 1 stdout, 2 stderr, 3 the outcome (a
`Status`: Success, or for a non-zero exit code reason `NonZeroExitCode` with the code in
`details.causes` `ExitCode`), 4 a terminal's size (`{"Width": w, "Height": h}`). v5 adds
the close signal: a message `255, channel` from the client closes that stream (its stdin:
end of input). `run_exec` runs a command in a container (sim.kubelet.containerexec) and
speaks the protocol for it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import WSMsgType, web

from . import containerexec, runtime

V4, V5 = "v4.channel.k8s.io", "v5.channel.k8s.io"
PROTOCOLS = (V5, V4)
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
READ_SIZE = 32 * 1024
SUCCESS: dict[str, Any] = {"metadata": {}, "status": "Success"}


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


async def run_exec(channels: Channels, container: Any, command: list[str], streams: containerexec.Streams) -> None:
    """Run `command` in `container` (a running ContainerProcess) with the client's `streams`,
    until it ends (its exit status sent last) or the client goes (then it is killed)."""
    if not isinstance(container, runtime.ContainerProcess):  # stub mode: no process to join
        await channels.finish(failure(
            "Internal error occurred: error executing command in container: the container has no "
            "processes (stub mode)"))
        return
    try:
        process = await containerexec.start(container, command, streams)
    except containerexec.ExecError as e:
        await channels.finish(failure(
            f"Internal error occurred: error executing command in container: failed to exec in container: "
            f"OCI runtime exec failed: exec failed: unable to start container process: {e}: unknown"))
        return
    pumps = [asyncio.create_task(_pump(channels, reader, channel))
             for reader, channel in ((process.stdout, STDOUT), (process.stderr, STDERR)) if reader is not None]
    reading = asyncio.create_task(_read_client(channels, process))
    try:
        code = await process.wait()
        await asyncio.gather(*pumps)
        await channels.finish(exit_status(code, command))
    finally:
        process.kill()  # the client went first: what it started ends with its stream
        for task in pumps + [reading]:
            task.cancel()
        await asyncio.gather(*pumps, reading, return_exceptions=True)
        process.close()


async def _pump(channels: Channels, reader: asyncio.StreamReader, channel: int) -> None:
    while True:
        try:
            data = await reader.read(READ_SIZE)
        except OSError:  # the stream broke (a terminal's end reads as end of file)
            return
        if not data:
            return
        await channels.send(channel, data)


async def _read_client(channels: Channels, process: containerexec.ExecProcess) -> None:
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


def _terminal_size(payload: bytes) -> tuple[int, int] | None:
    try:
        size = json.loads(payload)
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return None
    return (width, height) if 0 <= width < 2**16 and 0 <= height < 2**16 else None
