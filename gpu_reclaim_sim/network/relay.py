"""The ways between the run's network namespace (sim.network.namespace) and the namespace the
run started in, where the programs that started it live.

In (`Relay`): a port of the machine's loopback bound before the process enters its namespace,
so it stays outside, each connection to it relayed to an address inside (connected after
entering, so inside). How a run of the real control plane in a namespace of its own offers its
API server, its control endpoint and published Services to the programs outside.

Out (`Outward`): a port inside, at an address an EndpointSlice may name (the real API server
refuses loopback), each connection to it relayed to a port of the loopback of the namespace the
run started in, by a socket made there: by a thread that joined that namespace, so that the
event loop's thread stays inside. How the release's pods reach the demo's Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from . import namespace

Target = Callable[[], Awaitable[tuple[str, int]]]  # where a connection goes, asked at each one

CHUNK = 64 * 1024


class Relay:
    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Bind `host`:`port` (0: a free one) now, in the namespace the process is in."""
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
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
            inner_reader, inner_writer = await self._connect(*await self._target())
        except (OSError, LookupError):  # LookupError: the target is not there (yet)
            writer.close()
            return
        pipes = [asyncio.create_task(_pipe(reader, inner_writer)), asyncio.create_task(_pipe(inner_reader, writer))]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)


class Outward(Relay):
    def __init__(self, host: str, origin: int) -> None:
        """Bind `host`:0 now, inside; relay to the network namespace `origin` refers to
        (namespace.origin) once started."""
        super().__init__(0, host)
        # one thread, moved into `origin` before its first task: every socket it makes is there
        self._outside = ThreadPoolExecutor(1, thread_name_prefix="outward", initializer=namespace.join,
                                           initargs=(origin,))

    async def start_to(self, target: Target) -> None:
        """As Relay's; raises where the thread cannot join `origin` (concurrent.futures logs
        why), before anyone is told the address."""
        await asyncio.get_running_loop().run_in_executor(self._outside, _joined)
        await super().start_to(target)

    async def stop(self) -> None:
        await super().stop()
        self._outside.shutdown(wait=False)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        outside = await loop.run_in_executor(self._outside, socket.socket)
        try:
            outside.setblocking(False)
            await loop.sock_connect(outside, (host, port))  # connected from here: the socket stays outside
        except BaseException:
            outside.close()
            raise
        return await asyncio.open_connection(sock=outside)


def _joined() -> None:
    """A first task for the thread: its initializer (namespace.join) runs before it."""


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
