"""The server's end of a SPDY/3.1 session, as a kubelet keeps one (apimachinery's
httpstream/spdy over moby/spdystream), over any byte transport: `receive` is handed what
the client sends, `send` writes to it.

- A SYN_STREAM opens a stream: its id must be odd (the client's) and above the last one
  (else RST_STREAM PROTOCOL_ERROR, as spdystream answers); `accept(headers)` says why it
  is refused (RST_STREAM CANCEL, spdystream's Reset) or None: a SYN_REPLY, and the stream
  goes to `opened`. At most MAX_STREAMS are open (then REFUSED_STREAM).
- DATA goes to its stream's reader, FIN ends that stream's input; DATA for a stream that
  is not open is answered with RST_STREAM INVALID_STREAM; RST_STREAM ends a stream both ways.
- A client's PING is echoed; after a GOAWAY no stream is opened. SETTINGS and
  WINDOW_UPDATE are read and set nothing: spdystream neither announces nor keeps
  flow-control windows (a window kept here would stall kubectl after 64 KiB); the
  transport's own back-pressure holds instead.
- A frame that breaks the format: GOAWAY PROTOCOL_ERROR, and `receive` raises SessionError.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from . import spdyframes as f

MAX_STREAMS = 1000
INPUT_LIMIT = 1 << 20  # a stream's input held for its reader before the session waits for it


class StreamReset(ConnectionResetError):
    """The stream, or its whole session, was ended before its output was."""


class Stream:
    def __init__(self, session: Session, stream_id: int, headers: f.Headers) -> None:
        self.session, self.id, self.headers = session, stream_id, headers
        self._input: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._changed = asyncio.Event()
        self.input_ended = self.output_ended = self.was_reset = self.discarding = False

    async def read(self) -> bytes:
        """The next piece of the client's data; b"" once it has sent FIN (or reset)."""
        while not self._input:
            if self.input_ended:
                return b""
            self._changed.clear()
            await self._changed.wait()
        data = self._input.popleft()
        self._held -= len(data)
        self._changed.set()
        return data

    async def write(self, data: bytes) -> None:
        if self.was_reset or self.output_ended:
            raise StreamReset(f"stream {self.id} is closed")
        await self.session.send_frame(lambda w: w.data(self.id, data))

    async def close(self) -> None:
        """FIN: nothing more from this end (once; nothing after a reset)."""
        if not (self.was_reset or self.output_ended):
            self.output_ended = True
            await self.session.send_frame(lambda w: w.data(self.id, b"", fin=True))
            self.session.forget(self)

    def discard(self) -> None:
        """The reader is gone: what the client still sends is dropped."""
        self.discarding = True
        self._input.clear()
        self._held = 0
        self._changed.set()

    async def _deliver(self, data: bytes) -> None:
        """Hold the client's data for the reader, waiting while it holds too much."""
        while self._held >= INPUT_LIMIT and not (self.discarding or self.input_ended):
            self._changed.clear()
            await self._changed.wait()
        if data and not (self.discarding or self.input_ended):
            self._input.append(data)
            self._held += len(data)
            self._changed.set()

    def _end_input(self, reset: bool = False) -> None:
        self.input_ended = True
        self.was_reset = self.was_reset or reset
        self._changed.set()


class Session:
    def __init__(self, send: Callable[[bytes], Awaitable[None]], accept: Callable[[f.Headers], str | None],
                 opened: Callable[[Stream], None]) -> None:
        self._send, self._accept, self._opened = send, accept, opened
        self._reader, self._writer = f.FrameReader(), f.FrameWriter()
        self._write_lock = asyncio.Lock()  # frames go out in the order their headers are compressed
        self.streams: dict[int, Stream] = {}
        self.last_id = 0
        self.going_away = False

    async def send_frame(self, make: Callable[[f.FrameWriter], bytes]) -> None:
        async with self._write_lock:
            await self._send(make(self._writer))

    async def receive(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except f.SessionError as e:
            await self.go_away(e.status)
            raise
        for frame in frames:
            await self._handle(frame)

    async def go_away(self, status: int = f.GOAWAY_OK) -> None:
        if not self.going_away:
            self.going_away = True
            await self.send_frame(lambda w: w.goaway(self.last_id, status))

    def end(self) -> None:
        """The transport is gone: every stream ends, its readers and writers told so."""
        for stream in list(self.streams.values()):
            stream._end_input(reset=True)
        self.streams.clear()

    def forget(self, stream: Stream) -> None:
        if stream.input_ended and (stream.output_ended or stream.was_reset):
            self.streams.pop(stream.id, None)

    async def _reset(self, stream_id: int, status: int) -> None:
        await self.send_frame(lambda w: w.rst_stream(stream_id, status))

    async def _handle(self, frame: f.Frame) -> None:
        if isinstance(frame, f.SynStream):
            await self._open(frame)
        elif isinstance(frame, f.Data):
            stream = self.streams.get(frame.stream_id)
            if stream is None or stream.input_ended:
                await self._reset(frame.stream_id, f.INVALID_STREAM if stream is None else f.STREAM_ALREADY_CLOSED)
                return
            await stream._deliver(frame.data)
            if frame.fin:
                stream._end_input()
                self.forget(stream)
        elif isinstance(frame, f.RstStream):
            stream = self.streams.pop(frame.stream_id, None)
            if stream is not None:
                stream._end_input(reset=True)
        elif isinstance(frame, f.Ping):
            if frame.ping_id % 2 == 1:  # the client's: answered; ours (even) we never send
                await self.send_frame(lambda w: w.ping(frame.ping_id))
        elif isinstance(frame, f.GoAway):
            self.going_away = True
        # SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY (this end opens no stream): nothing to do

    async def _open(self, frame: f.SynStream) -> None:
        if self.going_away:
            return
        if frame.stream_id % 2 == 0 or frame.stream_id <= self.last_id:
            await self._reset(frame.stream_id, f.PROTOCOL_ERROR)
            return
        self.last_id = frame.stream_id
        if len(self.streams) >= MAX_STREAMS:
            await self._reset(frame.stream_id, f.REFUSED_STREAM)
            return
        if self._accept(frame.headers) is not None:
            await self._reset(frame.stream_id, f.CANCEL)
            return
        stream = self.streams[frame.stream_id] = Stream(self, frame.stream_id, frame.headers)
        await self.send_frame(lambda w: w.syn_reply(frame.stream_id, {}))
        if frame.fin:
            stream._end_input()
        self._opened(stream)
