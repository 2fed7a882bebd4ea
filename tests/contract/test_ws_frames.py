"""The frame cutter and builder against ``websockets``' own codec: the same bytes in, the same events and answers out.

Random sequences of frames (plain text, fragments, control frames, binary,
reserved bits, the wrong masking, oversize, a close in the middle) are cut
into random chunks and fed to a bare codec and to a cutter over a second
codec. Both must give the same frames, the same bytes to send (pongs, the
closing handshake, its close code) and the same end state, on both sides
of a connection.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from pulse_trio.contract.ws_frames import FrameCutter, MaskKeys, queue_text, text_frame

LIMIT = 300  # a small codec limit, so oversize frames are cheap to make
#: Limits on both sides of the 7-bit length form (a header may announce 126 or 127 before its real length).
LIMITS = (100, 126, 127, LIMIT)


def _codec(server: bool, limit: int | None = LIMIT):
    if server:
        return ServerProtocol(state=OPEN, max_size=limit)
    return ClientProtocol(parse_uri("ws://localhost/"), state=OPEN, max_size=limit)


def _cutter(server: bool, limit: int | None = LIMIT) -> FrameCutter:
    cutter = FrameCutter(_codec(server, limit), masked=server)
    cutter.after_handshake(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert cutter.cutting
    return cutter


def _serialize(frame: Frame, masked: bool) -> bytes:
    return frame.serialize(mask=masked)


payloads = st.binary(max_size=140) | st.binary(min_size=126, max_size=LIMIT)
# Each item: (kind, payload, flag); the stream builder turns it into frame bytes.
items = st.tuples(
    st.sampled_from(["text", "text", "text", "fragments", "ping", "pong", "binary", "rsv", "wrong_mask",
                     "oversize", "close", "bad_opcode", "lone_cont", "unfinished"]),
    payloads, st.booleans())


def _stream(seq: list[tuple[str, bytes, bool]], masked: bool, limit: int = LIMIT) -> bytes:
    out = []
    for kind, payload, flag in seq:
        if kind == "text":
            out.append(_serialize(Frame(Opcode.TEXT, payload), masked))
        elif kind == "fragments":
            half = len(payload) // 2
            out.append(_serialize(Frame(Opcode.TEXT, payload[:half], fin=False), masked))
            if flag:  # a control frame between fragments is allowed
                out.append(_serialize(Frame(Opcode.PING, payload[:10]), masked))
            out.append(_serialize(Frame(Opcode.CONT, payload[half:]), masked))
        elif kind == "ping":
            out.append(_serialize(Frame(Opcode.PING, payload[:125]), masked))
        elif kind == "pong":
            out.append(_serialize(Frame(Opcode.PONG, payload[:125]), masked))
        elif kind == "binary":
            out.append(_serialize(Frame(Opcode.BINARY, payload), masked))
        elif kind == "rsv":
            raw = bytearray(_serialize(Frame(Opcode.TEXT, payload), masked))
            raw[0] |= 0x40
            out.append(bytes(raw))
        elif kind == "wrong_mask":
            out.append(_serialize(Frame(Opcode.TEXT, payload), not masked))
        elif kind == "oversize":
            out.append(_serialize(Frame(Opcode.TEXT, payload * 3 + b"x" * (limit + 1)), masked))
        elif kind == "close":
            out.append(_serialize(Frame(Opcode.CLOSE, Close(1000, "bye").serialize()), masked))
        elif kind == "bad_opcode":
            raw = bytearray(_serialize(Frame(Opcode.TEXT, payload), masked))
            raw[0] = (raw[0] & 0xF0) | 0x3
            out.append(bytes(raw))
        elif kind == "lone_cont":
            out.append(_serialize(Frame(Opcode.CONT, payload), masked))
        elif kind == "unfinished":  # a first fragment whose message never ends: what follows is out of place
            out.append(_serialize(Frame(Opcode.TEXT, payload, fin=False), masked))
    return b"".join(out)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def _view(events) -> list:
    return [(f.opcode, bytes(f.data), f.fin, f.rsv1, f.rsv2, f.rsv3) for f in events]


def _written(chunks: list[bytes], server: bool) -> list:
    """What a side wrote, as frames (a client masks with random keys, so bytes would differ) and EOF marks."""
    reader = _codec(server=not server)
    reader.max_message_size = None
    out = []
    for chunk in chunks:
        if chunk == b"":
            out.append("EOF")
            continue
        reader.receive_data(chunk)
        out += _view(reader.events_received())
    return out


def _end(codec) -> tuple:
    """A codec's end state: its state, the closes sent and received, and why its parser stopped."""
    problem = codec.parser_exc
    return (codec.state, codec.close_sent, codec.close_rcvd,
            (type(problem), str(problem)) if problem is not None else None)


def _run_both(server: bool, chunks: list[bytes], eof: bool, limit: int = LIMIT, close_before: int | None = None):
    """Both readers through the same chunks; ``close_before``: this side starts the closing handshake before that chunk."""
    codec = _codec(server, limit)
    cutter = _cutter(server, limit)
    seen_codec, seen_cutter, sent_codec, sent_cutter = [], [], [], []
    for at, chunk in enumerate(chunks):
        if at == close_before:
            for side in (codec, cutter.codec):
                if side.state is OPEN:
                    side.send_close(1000, "done")
        codec.receive_data(chunk)
        seen_codec += _view(codec.events_received())
        sent_codec += codec.data_to_send()
        seen_cutter += _view(cutter.receive(chunk))
        sent_cutter += cutter.codec.data_to_send()
        assert seen_cutter == seen_codec
        assert cutter.codec.state is codec.state
    if eof:
        codec.receive_eof()
        seen_codec += _view(codec.events_received())
        sent_codec += codec.data_to_send()
        seen_cutter += _view(cutter.receive_eof())
        sent_cutter += cutter.codec.data_to_send()
    return (seen_codec, _written(sent_codec, server), _end(codec)), \
        (seen_cutter, _written(sent_cutter, server), _end(cutter.codec))


@settings(max_examples=500, deadline=None)
@given(seq=st.lists(items, max_size=12), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
       server=st.booleans(), eof=st.booleans(), limit=st.sampled_from(LIMITS),
       close_before=st.none() | st.integers(min_value=0, max_value=8), trim=st.integers(min_value=0, max_value=6))
def test_the_cutter_gives_what_the_codec_gives(seq, cuts, server, eof, limit, close_before, trim):
    """``close_before``: this side closes first (its peer's frames then all go to the codec); ``trim``: with
    ``eof``, the stream ends inside its last frame."""
    data = _stream(seq, masked=server, limit=limit)  # a server receives masked frames, a client unmasked ones
    if eof and trim:
        data = data[:max(0, len(data) - trim)]
    expected, got = _run_both(server, _chunks(data, cuts), eof, limit, close_before)
    assert got == expected


def test_a_header_that_announces_a_16_bit_length_waits_for_it_before_choosing_who_reads_the_frame():
    """126 is over a limit of 100, but the real length (5) is not: the frame is the cutter's, not the codec's."""
    chunks = [b"\x81\x7e", b"\x00\x05hello", b"\x89\x00"]
    expected, got = _run_both(False, chunks, False, limit=100)
    assert got == expected
    assert [frame[:2] for frame in got[0]] == [(Opcode.TEXT, b"hello"), (Opcode.PING, b"")]


def test_a_whole_text_frame_inside_a_fragmented_message_is_the_codecs_to_refuse():
    """A first fragment, then a final text frame instead of its continuation: 1002, on both sides."""
    for server in (True, False):
        data = _stream([("unfinished", b"ab", False), ("text", b"cd", False)], masked=server)
        expected, got = _run_both(server, [data], False)
        assert got == expected
        assert got[2][1] == Close(1002, "expected a continuation frame")


def test_after_our_own_close_the_peers_last_frames_reach_the_codec_in_one_read():
    """We sent the close (the codec is CLOSING): the peer's text and its close, in one chunk, both arrive."""
    for server in (True, False):
        data = _stream([("text", b"late", False), ("close", b"", False)], masked=server)
        expected, got = _run_both(server, [data], False, close_before=0)
        assert got == expected
        assert [frame[:2] for frame in got[0]][:1] == [(Opcode.TEXT, b"late")] and got[2][2] == Close(1000, "bye")


def test_a_large_frame_read_one_byte_at_a_time():
    """Each read appends to the frame's start; the frame comes out whole, once, after its last byte."""
    cutter = _cutter(server=True, limit=2**20)
    payload = bytes(range(256)) * 256
    wire = text_frame(payload, b"\x01\x02\x03\x04")
    events = [event for at in range(len(wire)) for event in cutter.receive(wire[at:at + 1])]
    assert _view(events) == [(Opcode.TEXT, payload, True, False, False, False)]
    assert cutter.cutting


def test_plain_frames_are_cut_here_and_a_ping_goes_through_the_codec():
    cutter = _cutter(server=True)
    stream = (text_frame(b'{"a":1}', b"abcd") + _serialize(Frame(Opcode.PING, b"hi"), True)
              + text_frame(b"x" * 200, b"wxyz"))
    events = cutter.receive(stream[:5]) + cutter.receive(stream[5:])
    assert _view(events) == [(Opcode.TEXT, b'{"a":1}', True, False, False, False),
                             (Opcode.PING, b"hi", True, False, False, False),
                             (Opcode.TEXT, b"x" * 200, True, False, False, False)]
    assert cutter.codec.data_to_send() == [Frame(Opcode.PONG, b"hi").serialize(mask=False)]
    assert cutter.cutting


def test_frames_sent_with_the_handshake_leave_the_connection_to_the_codec():
    cutter = FrameCutter(_codec(server=True), masked=True)
    cutter.after_handshake(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x81")
    assert not cutter.cutting
    cutter.after_handshake(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert cutter.cutting


def test_after_the_close_everything_goes_to_the_codec():
    cutter = _cutter(server=True)
    close = Frame(Opcode.CLOSE, Close(1000, "").serialize()).serialize(mask=True)
    cutter.receive(close + text_frame(b"late", b"abcd"))
    assert not cutter.cutting and cutter.codec.state is not OPEN


@given(data=st.binary(max_size=70_000), masked=st.booleans())
@settings(max_examples=60, deadline=None)
def test_text_frame_is_the_codecs_frame(data, masked):
    mask = os.urandom(4) if masked else None
    built = text_frame(data, mask)
    reader = _codec(server=masked)
    reader.max_message_size = None
    reader.receive_data(built)
    [frame] = reader.events_received()
    assert (frame.opcode, bytes(frame.data), frame.fin) == (Opcode.TEXT, data, True)
    if not masked:
        assert built == Frame(Opcode.TEXT, data).serialize(mask=False)
    else:
        assert built[:2] == Frame(Opcode.TEXT, data).serialize(mask=True)[:2]


def test_mask_keys_come_four_bytes_at_a_time_and_refill():
    keys = MaskKeys()
    drawn = [keys.next() for _ in range(MaskKeys.BLOCK // 4 + 3)]
    assert all(len(k) == 4 for k in drawn)
    assert len(set(drawn)) > len(drawn) - 5  # random, so practically all distinct


def test_queued_text_keeps_its_place_among_the_codecs_own_frames():
    """A pong the codec answers after a queued text frame follows it, and the closing handshake follows both."""
    cutter = _cutter(server=True)
    queue_text(cutter.codec, b"first")
    cutter.receive(_serialize(Frame(Opcode.PING, b"hi"), True))
    queue_text(cutter.codec, b"second")
    cutter.codec.send_close(1000, "bye")
    assert _written(cutter.codec.data_to_send(), server=True) == [
        (Opcode.TEXT, b"first", True, False, False, False), (Opcode.PONG, b"hi", True, False, False, False),
        (Opcode.TEXT, b"second", True, False, False, False),
        (Opcode.CLOSE, Close(1000, "bye").serialize(), True, False, False, False)]
