"""Response compression, as the kube-apiserver does it.

The apiserver's `APIResponseCompression` feature (beta and on by default since
Kubernetes 1.16; k8s.io/apiserver's `responsewriters`) gzips a response whose body is
larger than 128 KiB when the request's `Accept-Encoding` has a `gzip` token, and says so
with `Content-Encoding: gzip` and `Vary: Accept-Encoding`; smaller bodies, watches and
logs go as they are. kubectl and client-go ask for gzip (Go's transport does, unless
`DisableCompression`), and so does aiohttp, hence kubernetes_asyncio and KubeSpawner; the
official `kubernetes` client (urllib3) does not.

The apiserver compresses every response anew. A list's items are compressed here in runs
that are kept from one list to the next (`ListCompressor`), so that listing 5,000 pods
after a few of them changed recompresses only the runs holding those few. The pieces are
raw deflate streams ending on a byte boundary (a sync flush), so that they concatenate
into one deflate stream, and each run uses the item before it as its dictionary, which is
exactly what precedes the run in the list (as pigz does for its blocks); the gzip
trailer's CRC-32 of the whole is combined from the pieces' CRCs.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

THRESHOLD = 128 * 1024  # defaultGzipThresholdBytes: bodies of at most this size are not compressed
LEVEL = 1  # defaultGzipContentEncodingLevel (kubernetes#112296: least CPU, nearly the same size)
RUN_END_MASK = 31  # a run of items ends after an item whose name hashes to 0 here: ~32 items

# A gzip member's header (RFC 1952) as Go's gzip writer makes it: no name, no time, OS unknown
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_FINAL_BLOCK = b"\x03\x00"  # an empty final block with fixed codes: ends the deflate stream
_POLY = 0xEDB88320  # CRC-32's polynomial, bits reversed


# --- CRC-32 of concatenated pieces (zlib's crc32_combine, which Python's zlib lacks) ---

def _multiply(a: int, b: int) -> int:
    """a·b modulo CRC-32's polynomial, in its reversed-bit representation (zlib's multmodp)."""
    product, m = 0, 1 << 31
    while a:
        if a & m:
            product ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


_X_2N = [1 << 30]  # x^(2^n) modulo the polynomial, n = 0..31
for _ in range(31):
    _X_2N.append(_multiply(_X_2N[-1], _X_2N[-1]))


def crc32_shift(length: int) -> int:
    """x^(8·length) modulo the polynomial: what `crc32_combine` multiplies the first CRC by
    to move it past `length` bytes (zlib's x2nmodp(length, 3))."""
    power, n = 1 << 31, 3  # x^0
    while length:
        if length & 1:
            power = _multiply(_X_2N[n & 31], power)
        length >>= 1
        n += 1
    return power


def crc32_combine(crc1: int, crc2: int, shift2: int) -> int:
    """The CRC-32 of A + B from A's CRC, B's and `crc32_shift(len(B))`."""
    return _multiply(shift2, crc1) ^ crc2


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an `Accept-Encoding` header asks for gzip, read as the apiserver reads it
    (`ContentEncodingSupported`): one of its comma-separated tokens is exactly `gzip`,
    without a q-value."""
    return any(token.strip() == "gzip" for token in accept_encoding.split(","))


def gzip(data: bytes) -> bytes:
    """`data` as one gzip member."""
    return b"".join(gzip_pieces(b"", Deflated.of(data)))


@dataclass(frozen=True)
class Deflated:
    """Raw deflate of some bytes, ending on a byte boundary (a sync flush) so that pieces
    concatenate, with what a gzip trailer needs: the bytes' CRC-32, their length, and the
    factor that moves a CRC of what precedes them past them (`crc32_shift`)."""

    data: bytes
    crc: int
    length: int
    shift: int

    @classmethod
    def of(cls, data: bytes, zdict: bytes | None = None) -> Deflated:
        """Compress `data`; `zdict`, if any, must be what the stream holds just before it."""
        compressor = (zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=zdict) if zdict
                      else zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS))
        return cls(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH), zlib.crc32(data), len(data),
                   crc32_shift(len(data)))


_END = Deflated.of(b"]}")  # what closes a list after its items


def gzip_pieces(head: bytes, rest: Deflated) -> list[bytes]:
    """A gzip member of `head` followed by what `rest` holds, in pieces to write."""
    first = Deflated.of(head)
    crc = crc32_combine(first.crc, rest.crc, rest.shift)
    size = (first.length + rest.length) & 0xFFFFFFFF
    return [_GZIP_HEADER + first.data, rest.data, _FINAL_BLOCK + crc.to_bytes(4, "little") + size.to_bytes(4, "little")]


class ListCompressor:
    """One list's items kept compressed between lists of it (see the module's doc).

    A run ends after an item whose name hashes to 0 under `RUN_END_MASK`, so that an object
    that comes or goes changes only its own run, and a changed object its run and the next
    (whose dictionary it is). A run is found again by the very bytes it holds: the stored
    versions' JSON and the item before it."""

    def __init__(self) -> None:
        self._runs: dict[tuple[bytes | None, ...], Deflated] = {}

    async def items(self, names: list[str], items: list[bytes]) -> Deflated:
        """The comma-joined `items` (named `names`) and the list's closing `]}`, compressed.
        Yields to the event loop after each run it had to compress, so that a list of many
        changed objects does not hold other requests for all of its time."""
        runs: dict[tuple[bytes | None, ...], Deflated] = {}
        pieces: list[bytes] = []
        crc = start = 0
        last = len(items) - 1
        for i, name in enumerate(names):
            if i < last and hash(name) & RUN_END_MASK:
                continue
            before = items[start - 1] if start else None
            members = items[start:i + 1]
            found = (before, *members)
            run = self._runs.get(found) or runs.get(found)
            if run is None:
                run = Deflated.of(b",".join([b"", *members] if start else members), before)
                await asyncio.sleep(0)
            runs[found] = run
            pieces.append(run.data)
            crc = crc32_combine(crc, run.crc, run.shift)
            start = i + 1
        self._runs = runs  # what the list no longer holds goes
        pieces.append(_END.data)
        length = sum(map(len, items)) + max(len(items) - 1, 0) + _END.length
        return Deflated(b"".join(pieces), crc32_combine(crc, _END.crc, _END.shift), length, crc32_shift(length))
