"""SPDY/3.1 frames, as the SPDY/3.1 draft (section 2) defines them and as kubectl's
`portforward.k8s.io` speaks them (moby/spdystream over golang's spdy framer): `FrameReader`
parses the bytes of one direction of a session into frames, `FrameWriter` writes them.

Each direction compresses its header blocks with one zlib stream for the whole session,
primed with the SPDY/3 dictionary (section 2.6.10.1) and flushed (Z_SYNC_FLUSH) at the end
of each block, so a reader must inflate every block in order, and a writer must keep its
compressor. What a peer sends is not trusted: a frame that breaks the format (a bad length,
a stream id of 0 where one is needed, a header block that does not parse or inflates past
`MAX_HEADER_BYTES`) is a `SessionError`, after which the session cannot go on (its header
compression may be out of step); an unknown control frame type is skipped, as the draft
says (2.2.1)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN, FLAG_UNIDIRECTIONAL = 0x01, 0x02
# RST_STREAM's status codes (2.6.3) and GOAWAY's (2.6.6)
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 2, 3, 5, 6
STREAM_IN_USE, STREAM_ALREADY_CLOSED = 8, 9
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR, GOAWAY_INTERNAL_ERROR = 0, 1, 2

HEADER_LEN = 8
MAX_HEADER_BYTES = 64 * 1024  # a header block's size once inflated: port-forward's three headers need < 100
_ID = 0x7FFFFFFF  # stream ids and the window delta are 31 bits, the top bit reserved


def _dictionary() -> bytes:
    words = ("options head post put delete trace accept accept-charset accept-encoding accept-language "
             "accept-ranges age allow authorization cache-control connection content-base content-encoding "
             "content-language content-length content-location content-md5 content-range content-type date etag "
             "expect expires from host if-match if-modified-since if-none-match if-range if-unmodified-since "
             "last-modified location max-forwards pragma proxy-authenticate proxy-authorization range referer "
             "retry-after server te trailer transfer-encoding upgrade user-agent vary via warning www-authenticate "
             "method get status").split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie",
                                              "keep-alive", "origin"]
    tail = ("100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
            "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
            "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
            "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in words) + tail.encode()


DICTIONARY = _dictionary()  # SPDY/3's, 1423 bytes

Headers = dict[str, str]  # name (lower case) -> value (several joined by NUL, as sent)


class SessionError(Exception):
    """The peer broke the protocol: answer GOAWAY with `status` and end the session."""

    def __init__(self, reason: str, status: int = GOAWAY_PROTOCOL_ERROR) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    fin: bool = False


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    fin: bool = False
    associated: int = 0
    priority: int = 0
    unidirectional: bool = False


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    values: tuple[tuple[int, int, int], ...]  # (flags, id, value)


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_stream_id: int
    status: int


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


Frame = Data | SynStream | SynReply | HeadersFrame | RstStream | Settings | Ping | GoAway | WindowUpdate


class FrameReader:
    """Frames from the bytes one peer sends, fed as they come (in any pieces)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames `data` completes; raises SessionError at the first broken one."""
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= HEADER_LEN:
            first, flags_length = struct.unpack_from(">II", self._buffer)
            flags, length = flags_length >> 24, flags_length & 0xFFFFFF  # (24 bits: at most 16 MiB buffered)
            if len(self._buffer) < HEADER_LEN + length:
                break
            body = bytes(self._buffer[HEADER_LEN:HEADER_LEN + length])
            del self._buffer[:HEADER_LEN + length]
            if first & 0x80000000:
                frame = self._control((first >> 16) & 0x7FFF, first & 0xFFFF, flags, body)
                if frame is not None:
                    frames.append(frame)
            elif first == 0:
                raise SessionError("a data frame on stream 0")
            else:
                frames.append(Data(first, body, bool(flags & FLAG_FIN)))
        return frames

    def _control(self, version: int, kind: int, flags: int, body: bytes) -> Frame | None:
        if version != VERSION:
            raise SessionError(f"SPDY version {version}: this end speaks {VERSION}")
        fin = bool(flags & FLAG_FIN)
        if kind == SYN_STREAM:
            if len(body) < 10:
                raise SessionError(f"a SYN_STREAM of {len(body)} bytes")
            stream_id, associated = (_stream_id(body, 0), _stream_id(body, 4))
            if stream_id == 0:
                raise SessionError("a SYN_STREAM for stream 0")
            return SynStream(stream_id, self._headers(body[10:]), fin, associated, body[8] >> 5,
                             bool(flags & FLAG_UNIDIRECTIONAL))
        if kind in (SYN_REPLY, HEADERS):
            if len(body) < 4 or _stream_id(body, 0) == 0:
                raise SessionError("a SYN_REPLY or HEADERS frame without a stream")
            cls = SynReply if kind == SYN_REPLY else HeadersFrame
            return cls(_stream_id(body, 0), self._headers(body[4:]), fin)
        if kind == RST_STREAM:
            _exact(body, 8, "RST_STREAM")
            return RstStream(_stream_id(body, 0), struct.unpack_from(">I", body, 4)[0])
        if kind == SETTINGS:
            count = struct.unpack_from(">I", body)[0] if len(body) >= 4 else -1
            if count < 0 or len(body) != 4 + 8 * count:
                raise SessionError(f"a SETTINGS frame of {len(body)} bytes for {count} entries")
            entries = [struct.unpack_from(">II", body, 4 + 8 * i) for i in range(count)]
            return Settings(tuple((head >> 24, head & 0xFFFFFF, value) for head, value in entries))
        if kind == PING:
            _exact(body, 4, "PING")
            return Ping(struct.unpack(">I", body)[0])
        if kind == GOAWAY:
            _exact(body, 8, "GOAWAY")
            return GoAway(_stream_id(body, 0), struct.unpack_from(">I", body, 4)[0])
        if kind == WINDOW_UPDATE:
            _exact(body, 8, "WINDOW_UPDATE")
            return WindowUpdate(_stream_id(body, 0), _stream_id(body, 4))
        return None  # unknown (2.2.1: ignored)

    def _headers(self, block: bytes) -> Headers:
        """A header block, inflated at most to MAX_HEADER_BYTES."""
        try:
            raw = self._inflate.decompress(block, MAX_HEADER_BYTES + 1)
        except zlib.error as e:
            raise SessionError(f"a header block that does not inflate: {e}") from None
        if len(raw) > MAX_HEADER_BYTES or self._inflate.unconsumed_tail:
            raise SessionError(f"a header block of more than {MAX_HEADER_BYTES} bytes")
        return parse_header_block(raw)


def parse_header_block(raw: bytes) -> Headers:
    """The name/value pairs of an inflated header block (2.6.10): lower-case names, none
    empty or twice."""
    def take(at: int) -> tuple[bytes, int]:
        if at + 4 > len(raw):
            raise SessionError("a header block cut short")
        size = struct.unpack_from(">I", raw, at)[0]
        if at + 4 + size > len(raw):
            raise SessionError("a header block cut short")
        return raw[at + 4:at + 4 + size], at + 4 + size

    if len(raw) < 4:
        raise SessionError("a header block cut short")
    count, at, headers = struct.unpack_from(">I", raw)[0], 4, {}
    for _ in range(count):  # each pair takes 8 bytes or more: a count past the block stops at `take`
        name, at = take(at)
        value, at = take(at)
        key = name.decode("latin-1")
        if not key or key != key.lower() or key in headers:
            raise SessionError(f"header name {key!r}: empty, not lower case or repeated")
        headers[key] = value.decode("latin-1")
    if at != len(raw):
        raise SessionError("bytes after the header block's last pair")
    return headers


def _stream_id(body: bytes, at: int) -> int:
    return int(struct.unpack_from(">I", body, at)[0]) & _ID


def _exact(body: bytes, size: int, name: str) -> None:
    if len(body) != size:
        raise SessionError(f"a {name} frame of {len(body)} bytes, not {size}")


class FrameWriter:
    """The bytes of frames to one peer (its header compression kept across them)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY,
                                         zdict=DICTIONARY)

    def _block(self, headers: Headers) -> bytes:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode("latin-1") + struct.pack(">I", len(v)) + v.encode("latin-1")
            for k, v in headers.items())
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    @staticmethod
    def control(kind: int, flags: int, body: bytes) -> bytes:
        return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(body)) + body

    @staticmethod
    def data(stream_id: int, data: bytes, fin: bool = False) -> bytes:
        return struct.pack(">II", stream_id & _ID, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data

    def syn_stream(self, stream_id: int, headers: Headers, fin: bool = False) -> bytes:
        body = struct.pack(">IIBB", stream_id, 0, 0, 0) + self._block(headers)
        return self.control(SYN_STREAM, FLAG_FIN if fin else 0, body)

    def syn_reply(self, stream_id: int, headers: Headers, fin: bool = False) -> bytes:
        return self.control(SYN_REPLY, FLAG_FIN if fin else 0, struct.pack(">I", stream_id) + self._block(headers))

    def rst_stream(self, stream_id: int, status: int) -> bytes:
        return self.control(RST_STREAM, 0, struct.pack(">II", stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        return self.control(PING, 0, struct.pack(">I", ping_id))

    def goaway(self, last_stream_id: int, status: int) -> bytes:
        return self.control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))
