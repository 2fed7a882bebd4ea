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
