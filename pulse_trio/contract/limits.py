"""Fixed numbers of the pulse.worker.v1 contract, and the frame-size gate.

These are wire facts, not tuning knobs: a peer is entitled to rely on them,
so they live here rather than in configuration.
"""

from __future__ import annotations

from .errors import FrameTooLarge

PROTOCOL_VERSION = "1"
SUBPROTOCOL = "pulse.worker.v1"
ENDPOINT_PATH = "/v1/worker"

#: Whole frame, as UTF-8, checked before any JSON parsing (close 1009).
MAX_FRAME_BYTES = 524_288
#: A finish result, as the UTF-8 bytes of its canonical compact JSON text.
MAX_RESULT_BYTES = 262_144
#: Task payloads share the result bound (enforced where tasks are submitted).
MAX_PAYLOAD_BYTES = 262_144
#: Nesting of objects and arrays; the frame's own object is depth 1.
MAX_DEPTH = 32
#: Depth left for a finish ``result`` / an assigned ``payload`` below the frame.
MAX_RESULT_DEPTH = MAX_DEPTH - 2
MAX_PAYLOAD_DEPTH = MAX_DEPTH - 3
#: More invalid frames than this in one session make the next one fatal.
MAX_INVALID_FRAMES = 10

#: Numbers inside result/payload: beyond these, most consumers lose the value.
MAX_NUMBER_EXPONENT = 308
MAX_INTEGER_DIGITS = 4300

MAX_CAPACITY = 10_000
MAX_SUBSCRIPTIONS = 64
MAX_KINDS = 64
MAX_LABEL_CHARS = 128
MAX_CONCURRENCY_KEY_CHARS = 128
MAX_FAIRNESS_KEY_CHARS = 128
MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_ERROR_MESSAGE_CHARS = 4096
MAX_REASON_CHARS = 1024
MIN_PRIORITY = 0
MAX_PRIORITY = 9
#: Counters (epoch, sequence, revision, concurrency_token) are uint64, never 0.
MAX_COUNTER = 2**64 - 1
#: Other JSON integers (ms durations, attempts, counts) stay within int32.
MAX_INT32 = 2**31 - 1


def check_frame_size(frame: str | bytes | bytearray | memoryview) -> None:
    """Raise FrameTooLarge when the frame exceeds MAX_FRAME_BYTES of UTF-8.

    Text is encoded only when its character count cannot decide, because
    this runs on every frame: ASCII text is one byte per character, and any
    text is at most four bytes per character.
    """
    if isinstance(frame, str):
        chars = len(frame)
        if frame.isascii() or chars > MAX_FRAME_BYTES:
            size = chars
        elif chars * 4 <= MAX_FRAME_BYTES:
            return
        else:
            size = len(frame.encode("utf-8", "surrogatepass"))
    else:
        size = memoryview(frame).nbytes
    if size > MAX_FRAME_BYTES:
        raise FrameTooLarge(size, MAX_FRAME_BYTES)
