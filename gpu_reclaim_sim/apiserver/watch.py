"""Streaming a watch to an HTTP client the way the apiserver does.

Newline-delimited JSON events (`{"type": "ADDED", "object": {...}}`) on a chunked 200
response; everything queued is written in one chunk so a burst of changes costs one
write. A resourceVersion older than the retained history is reported as an ERROR event
carrying a 410 Expired Status (with HTTP 200), which is what client libraries expect
from a real watch. The stream ends cleanly after `timeoutSeconds`, when the client goes
away, or when the server stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any, Callable

from aiohttp import web

from .. import errors
from ..store import Filter, Obj, Store, Watch

log = logging.getLogger("gpu_reclaim_sim.apiserver.watch")

Encoder = Callable[[str, Obj], Obj]  # (event type, object) -> the object to send
_LIVENESS_CHECK = 1.0  # seconds between checks that an idle client is still there
_MAX_BATCH = 500
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class WatchStream:
    """One watch request, from the first byte to the end of the stream."""

    def __init__(
        self,
        store: Store,
        flt: Filter,
        resource_version: str | None,
        *,
        timeout: float,
        bookmark_interval: float | None,
        send_initial_events: bool = False,
        encode: Encoder | None = None,
    ) -> None:
        self.store = store
        self.filter = flt
        self.resource_version = resource_version
        self.timeout = timeout
        self.bookmark_interval = bookmark_interval
        self.send_initial_events = send_initial_events
        self.encode = encode  # None: the stored object as it is
        self.watch: Watch | None = None
        self.initial_rv = 0
        self.stopped = False

    def stop(self) -> None:
        """End the stream (server shutdown)."""
        self.stopped = True
        if self.watch is not None:
            self.watch.close()

    async def run(self, request: web.Request) -> web.StreamResponse:
        try:
            self.initial_rv = self.store.rv  # what the initial events (if any) reflect
            self.watch = self.store.watch(self.filter, self.resource_version)
        except errors.ApiError as e:
            if e.code != 410:
                raise  # e.g. a malformed resourceVersion: a plain error response
            return await self._error_event(request, e)
        response = await self._prepare(request)
        try:
            await self._pump(request, response, self.watch)
        except (ConnectionResetError, asyncio.CancelledError):
            log.debug("watch client went away: %s", request.path_qs)
        finally:
            self.watch.close()
        return response

    async def _prepare(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "application/json", "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        return response

    async def _error_event(self, request: web.Request, err: errors.ApiError) -> web.StreamResponse:
        response = await self._prepare(request)
        await response.write(dumps({"type": "ERROR", "object": err.status()}) + b"\n")
        await response.write_eof()
        return response

    async def _pump(self, request: web.Request, response: web.StreamResponse, watch: Watch) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        next_bookmark = loop.time() + self.bookmark_interval if self.bookmark_interval else math.inf
        initial_left = watch.queue.qsize() if self.send_initial_events else -1
        if initial_left == 0:
            await response.write(self._bookmark(initial_end=True))
            initial_left = -1
        while not self.stopped:
            now = loop.time()
            if now >= deadline:
                break
            item = await watch.next(min(deadline, next_bookmark, now + _LIVENESS_CHECK) - now)
            if item is None:
                if watch.closed or _client_gone(request):
                    break
                if loop.time() >= next_bookmark and watch.queue.empty():
                    # safe: every change up to store.rv is already in our (empty) queue
                    await response.write(self._bookmark())
                    next_bookmark = loop.time() + (self.bookmark_interval or math.inf)
                continue
            batch, closed = self._drain(item)
            chunk = bytearray()
            for type_, obj in batch:
                body = (dumps(self.encode(type_, obj)) if self.encode
                        else self.store.encoded(self.filter.rtype, obj))
                chunk += b'{"type":"%s","object":%s}\n' % (type_.encode(), body)
                if initial_left > 0:
                    initial_left -= 1
                    if initial_left == 0:
                        chunk += self._bookmark(initial_end=True)
                        initial_left = -1
            await response.write(bytes(chunk))
            if closed:
                break
        if not _client_gone(request):
            await response.write_eof()

    def _drain(self, first: tuple[str, Obj]) -> tuple[list[tuple[str, Obj]], bool]:
        """`first` plus whatever else is queued right now (bounded, to keep chunks small
        enough for clients); and whether the watch was closed."""
        assert self.watch is not None
        batch, queue = [first], self.watch.queue
        while not queue.empty() and len(batch) < _MAX_BATCH:
            item = queue.get_nowait()
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _bookmark(self, initial_end: bool = False) -> bytes:
        rv = self.initial_rv if initial_end else self.store.rv
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {"kind": self.filter.rtype.kind, "apiVersion": self.filter.rtype.api_version, "metadata": meta}
        return dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()
