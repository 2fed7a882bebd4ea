"""The strict JSON scanner and canonical JSON text."""

from __future__ import annotations

import json
import time

import pytest

from pulse_trio.contract.jsontext import JsonText, dumps, utf8_size
from pulse_trio.contract.scanner import JsonNumber, RawJson, ScanError, number_problem, scan


def test_plain_json_parses_like_the_stdlib() -> None:
    text = '{"a": [1, "x", true, false, null, {"b": {}}], "c": ""}'
    assert scan(text) == json.loads(text)


def test_short_integers_are_ints_and_everything_else_keeps_its_text() -> None:
    value = scan("[0, -7, 12345678901234567890, 123456789012345678901, -0, 1.10, 1E5, 1e-7, 2.50e+3]")
    assert value[:3] == [0, -7, 12345678901234567890]
    assert all(type(v) is int for v in value[:3])
    assert value[3:] == [JsonNumber(t) for t in ("123456789012345678901", "-0", "1.10", "1E5", "1e-7", "2.50e+3")]
    assert JsonNumber("-0").is_integer_token and JsonNumber("10").is_integer_token
    assert not JsonNumber("1.0").is_integer_token and not JsonNumber("1e0").is_integer_token


def test_numbers_survive_digit_for_digit() -> None:
    text = '{"n":[1.10,1E5,-0,1e-7,0.1000000000000000055511151231257827,123456789012345678901234567890]}'
    assert JsonText.parse(text, max_depth=32) == text


def test_a_number_reads_exactly_or_not_at_all() -> None:
    """Range checks compare the token's own digits; an exponent no Decimal holds reads as None."""
    from decimal import Decimal

    assert JsonNumber("0.1").exact() == Decimal("0.1")
    assert JsonNumber("1e400").exact() == Decimal("1e400")
    assert JsonNumber("1e999999999999999999999").exact() is None


@pytest.mark.parametrize("text", [
    '{"a":1,"a":2}',
    '{"x":{"a":1,"b":2,"a":3}}',
    '[{"ok":1},{"k":1,"k":1}]',
    '{"a":1,"\\u0061":2}',  # the same key, spelled differently
])
def test_duplicate_keys_are_refused_at_any_depth(text: str) -> None:
    with pytest.raises(ScanError, match="duplicate key"):
        scan(text)


@pytest.mark.parametrize("text", [
    '"\\ud800"', '"\\uDBFF"', '"\\udc00"', '"a\\ude00b"', '"\\ude00\\ud83d"', '"\\ud800\\u0041"',
    '{"\\ud800":1}', '[["\\udfff"]]',
    '"\ud800"',  # a lone surrogate already in the Python str (never from UTF-8)
])
def test_lone_surrogates_are_refused(text: str) -> None:
    with pytest.raises(ScanError, match="surrogate"):
        scan(text)


def test_surrogate_pairs_and_escaped_backslashes_are_fine() -> None:
    assert scan('"\\ud83d\\ude00"') == "\U0001F600"
    assert scan('"\\\\ud800"') == "\\ud800"
    assert scan('"caf\u00e9 \U0001F600"') == "caf\u00e9 \U0001F600"


def _nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


@pytest.mark.parametrize("builder", [
    lambda d: _nested(d),
    lambda d: '{"a":' * d + "1" + "}" * d,
    lambda d: "[" + '{"a":[' * ((d - 1) // 2) + ("{}" if d % 2 == 0 else "") + "]}" * ((d - 1) // 2) + "]",
])
def test_depth_32_passes_and_33_fails(builder) -> None:
    assert scan(builder(32)) is not None
    with pytest.raises(ScanError, match="nesting deeper than 32"):
        scan(builder(33))


def test_depth_limit_is_a_parameter_and_brackets_in_strings_do_not_count() -> None:
    with pytest.raises(ScanError):
        scan(_nested(5), max_depth=4)
    assert scan('["' + "[" * 100 + '"]') == ["[" * 100]
    with pytest.raises(ScanError, match="nesting"):
        scan(_nested(200_000))


@pytest.mark.parametrize("text", [
    "NaN", "[Infinity]", '{"a":-Infinity}', "[1,]", '{"a":1,}', "01", "[+1]", "[.5]", "[1.]", "[1e]", "tru",
    '"\t"', "'a'", "[1] x", "{} {}", "", " ", "\ufeff{}", "[\u0661]", '{"a" 1}', "[1 2]", "//\n{}",
])
def test_anything_but_strict_json_is_refused(text: str) -> None:
    with pytest.raises(ScanError):
        scan(text)


def test_bytes_are_not_scanned() -> None:
    # json.loads(bytes) would guess UTF-16/32; UTF-8 decoding is the caller's job.
    with pytest.raises(TypeError):
        scan(b"{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("token, bad", [
    ("1e308", False), ("-1.5E-308", False), ("1e000000308", False), ("9" * 4300, False), ("-" + "9" * 4300, False),
    ("9" * 4300 + ".5e10", False), ("0." + "0" * 5000 + "1", False),
    ("1e309", True), ("1E-309", True), ("1e+400", True), ("1e" + "9" * 5000, True), ("9" * 4301, True),
    ("9" * 4301 + ".0", True),
])
def test_number_rules_for_results_and_payloads(token: str, bad: bool) -> None:
    assert (number_problem(token) is not None) == bad


def test_dumps_splices_raw_fragments_in_order() -> None:
    text, problem = dumps({"a": [JsonNumber("1.10"), RawJson('{"x":1}')], "b": JsonNumber("-0")})
    assert text == '{"a":[1.10,{"x":1}],"b":-0}'
    assert problem is None
    _, problem = dumps([JsonNumber("1"), JsonNumber("1e999"), JsonNumber("1e400")], check_numbers=True)
    assert problem is not None and "1e999" in problem


def test_dumps_refuses_a_string_that_collides_with_its_placeholder() -> None:
    # Only a lone surrogate could collide; scanned text can never hold one.
    with pytest.raises(ValueError):
        dumps(["\udc00", JsonNumber("1.5")])


def test_json_text_is_canonical_compact_text() -> None:
    assert JsonText.parse(' { "b" : [ 1 , 2 ] , "a" : "\\u00e9\\n" } ', max_depth=32) == '{"b":[1,2],"a":"\u00e9\\n"}'
    assert JsonText.from_value({"x": 1.5, "y": [None, True]}, max_depth=32) == '{"x":1.5,"y":[null,true]}'
    assert JsonText.parse("null", max_depth=1) == "null"
    assert JsonText.parse('{"a":1.10}', max_depth=1).load() == {"a": JsonNumber("1.10")}
    for bad in (float("nan"), float("inf"), "\ud800", ["\udc00"]):
        with pytest.raises(ScanError):
            JsonText.from_value(bad, max_depth=32)
    with pytest.raises(ScanError):
        JsonText.parse("[[1]]", max_depth=1)


def test_utf8_size_counts_bytes() -> None:
    assert utf8_size("abc") == 3
    assert utf8_size("\u00e9") == 2
    assert utf8_size("\U0001F600") == 4


def test_scanning_is_fast_enough_for_the_hot_path() -> None:
    # A loose guard against accidental quadratic work, not a benchmark:
    # a typical finish frame scans in a few microseconds.
    frame = json.dumps({"protocol_version": "1", "type": "task.finish", "id": "f1",
                        "body": {"result": {"rows": [{"id": i, "v": i / 3} for i in range(20)]}}})
    started = time.perf_counter()
    for _ in range(2000):
        scan(frame)
    assert time.perf_counter() - started < 2.0
