"""The node agent's SPDY/3.1 framing and session (what `kubectl port-forward` speaks to a
kubelet), on frames built here from the draft's layout: well-formed ones, and a hostile
client's (bad lengths, unknown types, reused stream ids, header blocks that inflate without
end). The session against kubectl itself: test_port_forward."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest

from gpu_reclaim_sim.nodeagent import spdyframes as f
from gpu_reclaim_sim.nodeagent.portforward import stream_error
from gpu_reclaim_sim.nodeagent.spdysession import INPUT_LIMIT, Session, Stream, StreamReset

from ..support.kubeletapi import control, header_bomb

PAIR = {"streamtype": "error", "port": "8000", "requestid": "0"}


def test_header_blocks_are_deflated_with_the_spdy3_dictionary():
    """The draft's (2.6.10.1: 1423 bytes, length-prefixed words then ",enq=0."), named in each
    compressed stream's zlib header (FDICT, its Adler-32) as a peer's inflater checks it."""
    assert len(f.DICTIONARY) == 1423 and f.DICTIONARY.startswith(b"\0\0\0\x07options\0\0\0\x04head")
    assert f.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")
    block = f.FrameWriter().syn_reply(1, {"a": "b"})[12:]
    assert block[1] & 0x20 and struct.unpack(">I", block[2:6])[0] == zlib.adler32(f.DICTIONARY)


def test_frames_round_trip_in_any_pieces():
    client, server = f.FrameWriter(), f.FrameReader()
    wire = (client.syn_stream(1, PAIR) + client.syn_stream(3, {**PAIR, "streamtype": "data"}, fin=True)
            + client.data(3, b"payload", fin=True) + client.rst_stream(1, f.CANCEL) + client.ping(7)
            + client.goaway(3, f.GOAWAY_OK) + control(f.SETTINGS, struct.pack(">III", 1, (1 << 24) | 7, 65536))
            + control(f.WINDOW_UPDATE, struct.pack(">II", 3, 4096))
            + client.syn_reply(2, {"x": "1\x002"}))
    frames = [frame for i in range(len(wire)) for frame in server.feed(wire[i:i + 1])]  # a byte at a time
    assert frames == [
        f.SynStream(1, PAIR), f.SynStream(3, {**PAIR, "streamtype": "data"}, fin=True), f.Data(3, b"payload", True),
        f.RstStream(1, f.CANCEL), f.Ping(7), f.GoAway(3, f.GOAWAY_OK), f.Settings(((1, 7, 65536),)),
        f.WindowUpdate(3, 4096), f.SynReply(2, {"x": "1\x002"})]


def test_an_unknown_control_frame_is_skipped():
    client, server = f.FrameWriter(), f.FrameReader()
    assert server.feed(control(99, b"whatever it holds") + client.ping(1)) == [f.Ping(1)]


@pytest.mark.parametrize("wire, said", [
    (control(f.RST_STREAM, b"\0\0\0\1"), "RST_STREAM frame of 4 bytes"),
    (control(f.PING, b"\0\0\0\1\0"), "PING frame of 5 bytes"),
    (control(f.GOAWAY, b""), "GOAWAY frame of 0 bytes"),
    (control(f.WINDOW_UPDATE, b"\0" * 12), "WINDOW_UPDATE frame of 12 bytes"),
    (control(f.SETTINGS, struct.pack(">I", 1000)), "SETTINGS frame of 4 bytes for 1000 entries"),
    (control(f.SYN_STREAM, b"\0\0\0\1"), "SYN_STREAM of 4 bytes"),
    (control(f.SYN_REPLY, b"\0\0"), "without a stream"),
    (control(f.PING, b"\0\0\0\1", version=2), "SPDY version 2"),
    (struct.pack(">II", 0, 3) + b"abc", "data frame on stream 0"),
    (control(f.SYN_STREAM, struct.pack(">IIBB", 1, 0, 0, 0) + b"\0\1not zlib"), "does not inflate"),
])
def test_a_broken_frame_ends_the_session(wire, said):
    with pytest.raises(f.SessionError, match=said):
        f.FrameReader().feed(wire)


def _syn_stream(raw_block: bytes, stream_id: int = 1) -> bytes:
    deflate = zlib.compressobj(zdict=f.DICTIONARY)
    block = deflate.compress(raw_block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    return control(f.SYN_STREAM, struct.pack(">IIBB", stream_id, 0, 0, 0) + block)


def _pairs(*pairs: tuple[bytes, bytes], count: int | None = None) -> bytes:
    return struct.pack(">I", len(pairs) if count is None else count) + b"".join(
        struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in pairs)


def test_a_header_block_that_inflates_past_the_bound_is_refused():
    """Refused once MAX_HEADER_BYTES are out, without inflating the rest."""
    with pytest.raises(f.SessionError, match=f"more than {f.MAX_HEADER_BYTES} bytes"):
        f.FrameReader().feed(header_bomb())


@pytest.mark.parametrize("raw, said", [
    (_pairs((b"port", b"1"), count=2), "cut short"),
    (_pairs((b"port", b"1"), count=0x7FFFFFFF), "cut short"),
    (_pairs((b"Port", b"1")), "not lower case"),
    (_pairs((b"port", b"1"), (b"port", b"2")), "repeated"),
    (_pairs((b"", b"1")), "empty"),
    (_pairs((b"port", b"1")) + b"extra", "after the header block"),
    (b"\0\0", "cut short"),
])
def test_a_header_block_that_does_not_parse_is_refused(raw, said):
    with pytest.raises(f.SessionError, match=said):
        f.FrameReader().feed(_syn_stream(raw))


class Client:
    """A session's far end: frames to it, and what it answered (parsed)."""

    def __init__(self, refuse: str | None = None) -> None:
        self.out, self.reader, self.writer = bytearray(), f.FrameReader(), f.FrameWriter()
        self.opened: list[Stream] = []

        async def send(data: bytes) -> None:
            self.out += data

        self.session = Session(send, lambda headers: refuse if headers.get("port") != "8000" else None,
                               self.opened.append)

    async def send(self, *frames: bytes) -> list[f.Frame]:
        for frame in frames:
            await self.session.receive(frame)
        answered = self.reader.feed(bytes(self.out))
        self.out.clear()
        return answered


async def test_a_session_opens_streams_and_carries_their_data_both_ways():
    client = Client()
    w = client.writer
    assert await client.send(w.syn_stream(1, PAIR), w.syn_stream(3, {**PAIR, "streamtype": "data"})) == [
        f.SynReply(1, {}), f.SynReply(3, {})]
    error, data = client.opened
    assert (error.id, data.id, data.headers["streamtype"]) == (1, 3, "data")
    assert await client.send(w.data(3, b"GET / HTTP/1.0\r\n"), w.data(3, b"\r\n", fin=True)) == []
    assert [await data.read(), await data.read(), await data.read()] == [b"GET / HTTP/1.0\r\n", b"\r\n", b""]
    await data.write(b"HTTP/1.0 200 OK\r\n")
    await data.close()
    await error.close()
    assert await client.send() == [f.Data(3, b"HTTP/1.0 200 OK\r\n"), f.Data(3, b"", True), f.Data(1, b"", True)]
    assert list(client.session.streams) == [1]  # the error stream waits for the client's FIN
    await client.send(w.data(1, b"", fin=True))
    assert client.session.streams == {}


async def test_stream_ids_must_be_the_clients_and_rise():
    client = Client()
    w = client.writer
    await client.send(w.syn_stream(5, PAIR))
    assert await client.send(w.syn_stream(5, PAIR)) == [f.RstStream(5, f.PROTOCOL_ERROR)]  # reused
    assert await client.send(w.syn_stream(3, PAIR)) == [f.RstStream(3, f.PROTOCOL_ERROR)]  # below the last
    assert await client.send(w.syn_stream(6, PAIR)) == [f.RstStream(6, f.PROTOCOL_ERROR)]  # even: the server's
    assert [s.id for s in client.opened] == [5]
    assert await client.send(w.syn_stream(7, PAIR)) == [f.SynReply(7, {})]  # and the session goes on


async def test_a_refused_stream_is_reset_and_unknown_streams_get_no_data():
    client = Client(refuse="no such port")
    w = client.writer
    assert await client.send(w.syn_stream(1, {**PAIR, "port": "1"})) == [f.RstStream(1, f.CANCEL)]
    assert await client.send(w.data(1, b"x")) == [f.RstStream(1, f.INVALID_STREAM)]
    assert await client.send(w.data(9, b"x")) == [f.RstStream(9, f.INVALID_STREAM)]
    assert client.opened == []


async def test_a_reset_ends_the_stream_both_ways():
    client = Client()
    w = client.writer
    await client.send(w.syn_stream(1, PAIR), w.data(1, b"early"))
    stream = client.opened[0]
    await client.send(w.rst_stream(1, f.CANCEL))
    assert [await stream.read(), await stream.read()] == [b"early", b""]
    with pytest.raises(StreamReset):
        await stream.write(b"late")
    assert await client.send(w.data(1, b"after")) == [f.RstStream(1, f.INVALID_STREAM)]


async def test_pings_are_answered_and_after_goaway_nothing_opens():
    client = Client()
    w = client.writer
    assert await client.send(w.ping(1), w.ping(2)) == [f.Ping(1)]  # the client's (odd) only
    assert await client.send(w.goaway(0, f.GOAWAY_OK), w.syn_stream(1, PAIR)) == []
    assert client.opened == []


async def test_a_broken_frame_is_answered_with_goaway():
    client = Client()
    w = client.writer
    await client.send(w.syn_stream(1, PAIR))
    with pytest.raises(f.SessionError):
        await client.session.receive(control(f.PING, b"\0"))
    assert client.reader.feed(bytes(client.out)) == [f.GoAway(1, f.GOAWAY_PROTOCOL_ERROR)]
    client.session.end()
    assert await client.opened[0].read() == b""


@pytest.mark.parametrize("headers, refused", [
    ({"streamtype": "data", "port": "8000"}, None),
    ({"streamtype": "error", "port": "65535", "requestid": "x"}, None),
    ({"streamtype": "data"}, '"port" header is required'),
    ({"streamtype": "data", "port": "0"}, 'unable to parse "0" as a port'),
    ({"streamtype": "data", "port": "65536"}, 'unable to parse "65536" as a port'),
    ({"streamtype": "data", "port": "\uff18\uff10"}, 'unable to parse "\uff18\uff10" as a port'),  # not Go's digits
    ({"streamtype": "data", "port": "9" * 5000}, f'unable to parse "{"9" * 5000}" as a port'),  # past int()'s limit
    ({"port": "80"}, '"streamType" header is required'),
    ({"streamtype": "other", "port": "80"}, 'invalid stream type "other"'),
])
def test_port_forward_streams_are_checked_as_the_kubelet_checks_them(headers, refused):
    assert stream_error(headers) == refused


async def test_data_after_fin_and_streams_past_the_bound_are_refused(monkeypatch):
    monkeypatch.setattr("gpu_reclaim_sim.nodeagent.spdysession.MAX_STREAMS", 2)
    client = Client()
    w = client.writer
    await client.send(w.syn_stream(1, PAIR), w.data(1, b"", fin=True))
    assert await client.send(w.data(1, b"more")) == [f.RstStream(1, f.STREAM_ALREADY_CLOSED)]
    assert await client.send(w.syn_stream(3, PAIR), w.syn_stream(5, PAIR)) == [
        f.SynReply(3, {}), f.RstStream(5, f.REFUSED_STREAM)]


async def test_a_stream_holds_a_bounded_input_and_drops_it_once_discarded():
    """Past INPUT_LIMIT the session waits for the stream's reader (back-pressure on the
    connection), and a stream whose reader has gone drops what still comes."""
    client = Client()
    w = client.writer
    await client.send(w.syn_stream(1, PAIR))
    stream = client.opened[0]
    chunk = b"x" * (64 * 1024)
    for _ in range(INPUT_LIMIT // len(chunk)):
        await client.session.receive(w.data(1, chunk))
    waiting = asyncio.create_task(client.session.receive(w.data(1, b"one more")))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await stream.read() == chunk  # room again: the session goes on
    await asyncio.wait_for(waiting, 5)
    stream.discard()
    await asyncio.wait_for(client.session.receive(w.data(1, chunk * 32)), 5)
    assert await client.send(w.data(1, b"", fin=True)) == [] and await stream.read() == b""
