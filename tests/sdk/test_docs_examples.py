"""The quick start's code is the example worker's own: README and docs/worker.md §1 quote it, never paraphrase it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "billing_worker.py").read_text()
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", ["README.md", "docs/worker.md"])
def test_the_quick_start_quotes_the_asyncio_example(page):
    text = (ROOT / page).read_text()
    first = BLOCK.search(text)
    assert first is not None, f"{page} has no Python block"
    code = first.group(1)
    assert "async def send_invoice(task: TaskContext, invoice: Invoice)" in code and "asyncio." in code
    for chunk in code.strip().split("\n\n\n"):  # each quoted definition, as the example has it
        assert chunk.strip() in EXAMPLE, f"{page} quotes code the example does not have:\n{chunk}"


@pytest.mark.live  # a sub-run of pytest, as the reader runs the examples
def test_the_handler_environment_examples_run_as_written(tmp_path):
    """Each HandlerEnvironment example (README, docs/worker.md §1, docs/worker.md §16) passes as written, on each loop.

    AnyIO's pytest plugin runs a test on every backend installed, and Trio
    always is (a dependency): a test of an asyncio handler must say so.
    """
    import os
    import subprocess
    import sys

    blocks = [code for page in ("README.md", "docs/worker.md") for code in BLOCK.findall((ROOT / page).read_text())
              if "HandlerEnvironment(" in code and "async def test_" in code]
    assert len(blocks) == 3, "the README's, docs/worker.md §1's and docs/worker.md §16's examples"
    for number, code in enumerate(blocks):
        (tmp_path / f"test_example_{number}.py").write_text(code)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:xdist -rs\n"
                                         "asyncio_default_fixture_loop_scope = function\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0 and "skipped" not in done.stdout, done.stdout[-3000:]
