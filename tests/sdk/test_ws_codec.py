"""The worker's lean text frames are the bytes ``websockets`` writes, and a real server codec reads them."""

from __future__ import annotations

import pytest
from websockets import frames as ws_frames
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from pulse_trio.sdk.ws_codec import KEYS_PER_READ, Codec, MaskKeys, masked_text_frame


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 70000])
@pytest.mark.parametrize("fin", [True, False])
def test_a_lean_text_frame_is_the_librarys_frame_for_the_same_key(monkeypatch, size, fin):
    key = b"\x01\xfe\x7f\x80"
    data = bytes(i % 251 for i in range(size))
    monkeypatch.setattr(ws_frames.secrets, "token_bytes", lambda n: key)
    assert masked_text_frame(data, fin, key) == Frame(Opcode.TEXT, data, fin).serialize(mask=True, extensions=[])


def test_mask_keys_are_four_fresh_bytes_each_and_read_in_blocks(monkeypatch):
    reads = []
    real = ws_frames.os.urandom

    def urandom(n):
        reads.append(n)
        return real(n)

    monkeypatch.setattr("pulse_trio.sdk.ws_codec.os.urandom", urandom)
    keys = MaskKeys()
    taken = [keys.take() for _ in range(KEYS_PER_READ + 1)]
    assert all(len(k) == 4 for k in taken)
    assert reads == [4 * KEYS_PER_READ] * 2
    assert len(set(taken)) > KEYS_PER_READ - 5  # collisions of 32-bit keys: a few at most, by chance


def _open_pair() -> tuple[Codec, ServerProtocol]:
    client = Codec(parse_uri("ws://localhost/v1/worker"))
    server = ServerProtocol()
    client.send_request(client.connect())
    server.receive_data(b"".join(client.data_to_send()))
    (request,) = server.events_received()
    server.send_response(server.accept(request))
    client.receive_data(b"".join(server.data_to_send()))
    assert client.events_received() and client.state.name == "OPEN"
    return client, server


def test_a_server_codec_reads_the_lean_frames_and_the_librarys_own_between_them():
    client, server = _open_pair()
    client.send_text(b'{"type":"task.start"}')
    client.send_ping(b"ping")  # the library's own path: masked by it
    client.send_text("é".encode() * 40_000)  # 80 000 bytes: the 64-bit length
    client.send_text(b"part one, ", fin=False)
    client.send_continuation(b"part two", fin=True)
    server.receive_data(b"".join(client.data_to_send()))
    got = [(f.opcode, bytes(f.data), f.fin) for f in server.events_received()]
    assert got == [(Opcode.TEXT, b'{"type":"task.start"}', True), (Opcode.PING, b"ping", True),
                   (Opcode.TEXT, "é".encode() * 40_000, True), (Opcode.TEXT, b"part one, ", False),
                   (Opcode.CONT, b"part two", True)]
    assert server.parser_exc is None
