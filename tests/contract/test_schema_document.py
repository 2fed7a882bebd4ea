"""The published schema file itself: where it lives, what it declares, how it is validated."""

from __future__ import annotations

import ast
import importlib.resources
import json
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import contract_support as s

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_FILE = ROOT / "protocol" / "workerv1" / "worker.schema.json"
PACKAGE = ROOT / "pulse_trio"

REQUIRED_DEFS = {
    "clientFrame", "serverFrame", "helloFrame", "capacityFrame", "resumeFrame", "startFrame", "renewFrame",
    "finishFrame", "welcomeFrame", "assignmentFrame", "cancellationFrame", "ackFrame", "errorFrame",
    "welcome", "lease", "assignedLease", "heldLease", "commandResult", "counter", "secret", "sessionId", "instanceId", "taskId", "leaseId",
    "time", "queue", "kind", "errorCode", "messageId", "concurrencyKey",
}
FRAME_DEFS = sorted(set(s.EXAMPLE_DEFS.values()) | {"startFrame", "renewFrame"})


def test_schema_is_draft_2020_12_with_a_stable_id() -> None:
    schema = s.schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == s.SCHEMA_ID
    Draft202012Validator.check_schema(schema)
    assert REQUIRED_DEFS <= set(schema["$defs"])
    assert schema["oneOf"] == [{"$ref": "#/$defs/clientFrame"}, {"$ref": "#/$defs/serverFrame"}]


def test_package_data_is_a_symlink_to_the_published_file() -> None:
    link = PACKAGE / "contract" / "worker.schema.json"
    assert link.is_symlink()
    assert link.resolve() == PROTOCOL_FILE.resolve()
    packaged = importlib.resources.files("pulse_trio.contract").joinpath("worker.schema.json").read_bytes()
    assert packaged == PROTOCOL_FILE.read_bytes()


def _walk(node, path="#"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def test_every_declared_object_is_closed_and_only_payload_and_result_are_open() -> None:
    for path, node in _walk(s.schema()):
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, path
        elif "properties" in node:
            # Only refinements of a closed definition: a $ref sibling or a condition.
            assert "$ref" in node or path.rsplit("/", 1)[-1] in ("if", "then"), path
    defs = s.schema()["$defs"]
    assert "type" not in defs["payload"] and "type" not in defs["result"]
    assert defs["result"]["not"] == {"type": "null"}


def test_patterns_stay_anchored_at_the_very_end() -> None:
    # Python's re lets "$" match before a final newline; every pattern guards it.
    for path, node in _walk(s.schema()):
        if "pattern" in node:
            assert node["pattern"].startswith("^") and node["pattern"].endswith("$(?!\\n)"), path


def test_date_time_format_is_really_asserted() -> None:
    assert "date-time" in Draft202012Validator.FORMAT_CHECKER.checkers
    pattern = s.schema()["$defs"]["time"]["pattern"]
    for impossible in ("2026-02-30T00:00:00Z", "2023-02-29T12:00:00.5Z", "2026-04-31T00:00:00Z"):
        assert re.search(pattern, impossible), "the pattern alone lets it through"
        assert not s.validator("time").is_valid(impossible), "only the format check catches it"
    assert s.validator("time").is_valid("2024-02-29T00:00:00.000001Z")


def test_root_accepts_both_directions_and_defs_split_them() -> None:
    root = s.validator()
    for name, build in {**s.CLIENT_EXAMPLES, **s.SERVER_EXAMPLES}.items():
        assert root.is_valid(build()), name
    assert not root.is_valid({"protocol_version": "1", "type": "worker.hello"})


@pytest.mark.parametrize("name", sorted(s.EXAMPLE_DEFS))
def test_each_example_matches_exactly_one_frame_definition(name: str) -> None:
    build = {**s.CLIENT_EXAMPLES, **s.SERVER_EXAMPLES}[name]
    matching = [d for d in FRAME_DEFS if s.validator(d).is_valid(build())]
    assert matching == [s.EXAMPLE_DEFS[name]]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_jsonschema_is_a_test_only_dependency() -> None:
    for path in PACKAGE.rglob("*.py"):
        assert not _imports(path) & {"jsonschema", "referencing"}, path


def test_the_contract_layer_is_sans_io() -> None:
    for path in (PACKAGE / "contract").glob("*.py"):
        assert not _imports(path) & {"trio", "trio_websocket", "pymysql", "transitions", "jsonschema"}, path


def test_contract_modules_stay_small() -> None:
    for path in (PACKAGE / "contract").glob("*.py"):
        assert len(path.read_text("utf-8").splitlines()) <= 420, path


def test_schema_file_is_plain_json_without_duplicate_keys() -> None:
    from pulse_trio.contract.scanner import scan

    text = PROTOCOL_FILE.read_text("utf-8")
    assert scan(text, max_depth=64) == json.loads(text)
