"""A port of the machine's loopback that leads into the run's network namespace
(sim.network.namespace): the socket is bound before the process enters the namespace, so it
stays outside, and each connection to it is relayed to an address inside (connected after
entering, so inside). How a run of the real control plane made in a namespace of its own
offers its API server and its control endpoint to the programs outside that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable

Target = Callable[[], Awaitable[tuple[str, int]]]  # where a connection goes, asked at each one

CHUNK = 64 * 1024


class Relay:
    def __init__(self, port: int = 0) -> None:
        """Bind 127.0.0.1:`port` (0: a free one) now, in the namespace the process is in."""
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self._socket.listen(128)
        self.port: int = self._socket.getsockname()[1]
        self._target: Target | None = None
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        """Relay each connection to `host:port` from now on."""
        async def fixed() -> tuple[str, int]:
            return host, port
        await self.start_to(fixed)

    async def start_to(self, target: Target) -> None:
        """Relay each connection to where `target()` says then (e.g. a Service's address)."""
        self._target = target
        self._server = await asyncio.start_server(self._relay, sock=self._socket)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        self._socket.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            assert self._target is not None
            inner_reader, inner_writer = await asyncio.open_connection(*await self._target())
        except (OSError, LookupError):  # LookupError: the target is not there (yet)
            writer.close()
            return
        pipes = [asyncio.create_task(_pipe(reader, inner_writer)), asyncio.create_task(_pipe(inner_reader, writer))]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until either side ends, then close the writer (its peer sees the end)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()
