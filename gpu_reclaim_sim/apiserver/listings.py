"""The API server's list responses: a whole list's items kept from one request to the next
until an object of its kind changes, compressed again off the request path for clients
that fetch it gzipped (see `compression`), and written to the client in pieces."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from aiohttp import web

from . import compression
from ..resources import ResourceType
from ..store import Filter, Key, Obj, Store, _key
from .watch import dumps

log = logging.getLogger("gpu_reclaim_sim.apiserver.listings")

_ITEMS_OPEN, _ITEMS_CLOSE = b',"items":[', b"]}"
_LIST_CHUNK = 1 << 20  # a list's body is written in pieces of this size
_KEPT_LISTINGS = 16
# seconds: a list fetched gzipped is compressed again once its kind has not changed for
# RECOMPRESS_QUIET, or, while it keeps changing, RECOMPRESS_AFTER after it changed
RECOMPRESS_QUIET = 0.1
RECOMPRESS_AFTER = 2.0


@dataclass
class Listing:
    """A list's items as of its resource's `revision` (the resourceVersion of its last
    change), kept for the next list of the same selection (`filter`; None for a page):
    their keys and JSON, and their compressed form once a client has asked for it
    (`gzip_wanted`: a client that accepts gzip has fetched it, even while it was too
    small to be compressed)."""

    filter: Filter | None
    revision: int
    keys: list[Key]
    items: list[bytes]
    compressor: compression.ListCompressor
    gzipped: compression.Deflated | None = None
    gzip_wanted: bool = False

    @property
    def size(self) -> int:
        """The length of the comma-joined items and the list's closing `]}`."""
        return sum(map(len, self.items)) + max(len(self.items) - 1, 0) + len(_ITEMS_CLOSE)


class Listings:
    """`Listings(store)`: the lists the API server keeps (`whole`) or makes for one
    request (`page`), and `write`s; `start()` / `stop()` the compression in the background."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._listings: dict[tuple[Any, ...], Listing] = {}  # see whole
        self._recompressing: asyncio.Task[None] | None = None
        self.recompress_quiet = RECOMPRESS_QUIET
        self.recompress_after = RECOMPRESS_AFTER

    def start(self) -> None:
        self._recompressing = asyncio.create_task(self._keep_lists_compressed())

    def stop(self) -> None:
        if self._recompressing is not None:
            self._recompressing.cancel()
            self._recompressing = None

    def page(self, rtype: ResourceType, items: list[Obj]) -> Listing:
        """Some of a list's items (a page, or a list the server does not keep)."""
        return Listing(None, 0, [_key(rtype, o) for o in items],
                       [self.store.encoded(rtype, o) for o in items], compression.ListCompressor())

    def whole(self, flt: Filter, selection: tuple[Any, ...]) -> Listing:
        """The items of a whole list, kept until an object of the kind changes, so that
        listing an unchanged collection again costs next to nothing (the store keeps each
        stored version's JSON), and with them what compressed them, which a list after a
        change reuses for the runs of items that did not change."""
        key = (flt.rtype.plural, *selection)
        revision = self.store.revisions.get(flt.rtype.plural, 0)
        kept = self._listings.get(key)
        if kept is not None and kept.revision == revision:
            return kept
        keys, items = self.store.list_encoded(flt)
        if kept is None and len(self._listings) >= _KEPT_LISTINGS:
            self._listings.clear()
        listing = self._listings[key] = Listing(flt, revision, keys, items,
                                                kept.compressor if kept else compression.ListCompressor(),
                                                gzip_wanted=kept is not None and kept.gzip_wanted)
        return listing

    @staticmethod
    async def _gzipped(listing: Listing) -> compression.Deflated:
        if listing.gzipped is None:
            listing.gzipped = await listing.compressor.items([k[1] for k in listing.keys], listing.items)
        return listing.gzipped

    async def _keep_lists_compressed(self) -> None:
        """Compress, off the request path, the lists that clients which accept gzip have
        fetched, once they are large enough to be compressed (see `write`): once their
        kind has had no change for `recompress_quiet` seconds (the end of a burst of
        writes), or `recompress_after` seconds after it changed while it keeps changing (a
        burst of writes does not pay for compressing after each), so that the first list
        after a change finds all but the latest changes compressed. The compressor yields
        to the event loop after each run of items it compresses."""
        seen: dict[str, int] = {}  # each kind's revision at the last look
        changed: dict[str, float] = {}  # when a kind was last seen to have changed
        stale: dict[tuple[Any, ...], float] = {}  # when a kept list was first seen out of date
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(self.recompress_quiet, self.recompress_after))
            revisions, now = dict(self.store.revisions), loop.time()
            changed.update((plural, now) for plural, revision in revisions.items() if seen.get(plural) != revision)
            seen = revisions
            stale = {key: since for key, since in stale.items() if key in self._listings}
            for key, kept in list(self._listings.items()):
                plural, *selection = key
                if kept.filter is None or not kept.gzip_wanted or kept.revision == revisions.get(plural, 0):
                    stale.pop(key, None)
                    continue
                since = stale.setdefault(key, now)
                if now - changed.get(plural, 0.0) < self.recompress_quiet and now - since < self.recompress_after:
                    continue  # still changing: wait for a quiet moment, or until recompress_after
                stale.pop(key, None)
                try:
                    listing = self.whole(kept.filter, tuple(selection))
                    if listing.size > compression.THRESHOLD:
                        await self._gzipped(listing)
                except Exception:  # the next list compresses it, and says what failed
                    log.exception("compressing the list of %s %s", plural, selection)

    async def write(self, request: web.Request, rtype: ResourceType, meta: dict[str, Any],
                    listing: Listing) -> web.StreamResponse:
        """The list of `rtype` with `meta` and the listing's items, gzipped when the client
        asks for it and the body is larger than the apiserver's threshold (see
        `compression`). The body is written in pieces, not copied into one more buffer,
        each waiting for the client to take it, so that the socket (and TLS) buffers
        stay small."""
        head = dumps({"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": meta})[:-1] + _ITEMS_OPEN
        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Cache-Control": "no-cache, private"})
        size = len(head) + listing.size
        pieces: Iterator[bytes] | list[bytes]
        gzip_wanted = compression.accepts_gzip(request.headers.get("Accept-Encoding", ""))
        listing.gzip_wanted |= gzip_wanted
        if size > compression.THRESHOLD and gzip_wanted:
            pieces = compression.gzip_pieces(head, await self._gzipped(listing))
            size = sum(map(len, pieces))
            response.headers["Content-Encoding"] = "gzip"
            response.headers["Vary"] = "Accept-Encoding"
        else:
            pieces = _plain_pieces(head, listing.items)
        response.content_length = size
        await response.prepare(request)
        for piece in pieces:
            view = memoryview(piece)
            for start in range(0, len(view), _LIST_CHUNK):
                await response.write(view[start:start + _LIST_CHUNK])
        await response.write_eof()
        return response


def _plain_pieces(head: bytes, items: list[bytes]) -> Iterator[bytes]:
    """`head`, the comma-joined items and the list's end, in pieces of about `_LIST_CHUNK`."""
    yield head
    start = size = 0
    for i, item in enumerate(items):
        size += len(item) + 1
        if size >= _LIST_CHUNK or i == len(items) - 1:
            yield b",".join([b"", *items[start:i + 1]] if start else items[start:i + 1])
            start, size = i + 1, 0
    yield _ITEMS_CLOSE
