"""Every example frame in docs/protocol.md is decoded and schema-validated, so the page cannot drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame, encode
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.contract.limits import MAX_DEPTH
from pulse_trio.contract.messages import CLIENT_TYPES, SERVER_TYPES

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
EXAMPLES = re.findall(r"```json (client|server)\n(.*?)```", DOC.read_text("utf-8"), re.S)


def test_the_page_shows_every_message_type() -> None:
    shown = {json.loads(text)["type"] for _, text in EXAMPLES}
    assert shown == set(CLIENT_TYPES) | set(SERVER_TYPES)


@pytest.mark.parametrize("direction, text", EXAMPLES, ids=[f"{d}-{i}" for i, (d, _) in enumerate(EXAMPLES)])
def test_documented_example_is_valid_for_schema_and_decoder(direction: str, text: str) -> None:
    assert s.validator(s.direction_def(direction)).is_valid(json.loads(text))
    decode = decode_client_frame if direction == "client" else decode_server_frame
    message = decode(text)
    assert decode(encode(message)) == message


@pytest.mark.parametrize("direction, text", EXAMPLES, ids=[f"{d}-{i}" for i, (d, _) in enumerate(EXAMPLES)])
def test_documented_example_is_what_the_encoder_writes(direction: str, text: str) -> None:
    """Field order and number text on the page are the canonical encoding, not just an equivalent frame."""
    decode = decode_client_frame if direction == "client" else decode_server_frame
    assert encode(decode(text)) == str(JsonText.parse(text, max_depth=MAX_DEPTH))
