"""Every citation in the repository lands inside it, on a section of ``docs/`` that exists.

``docs/`` is the product's own complete reference. A reader of the
repository has nothing else, so no file may point at a document or a path
outside it (the specification the product was first written from is not
shipped), and a citation such as ``docs/protocol.md §4.5`` must name a
numbered heading of that page. Links between Markdown pages, and their
``#anchors``, must resolve too.

This covers ``pulse_trio/`` like every other folder.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIPPED_DIRS = {".git", ".venv", ".pulse-state", "__pycache__", ".pytest_cache", ".hypothesis", "node_modules",
                "build", "dist"}

# Built from parts, so that this file does not cite what it forbids.
OUTSIDE_DOCUMENTS = ("worker-protocol", "platform", "seed-reading")
OUTSIDE_PATHS = (("", "work", ""), ("shared", "spec"), ("shared", "seed"))
OUTSIDE = re.compile("|".join(
    [rf"(?<![\w-])(?:{'|'.join(OUTSIDE_DOCUMENTS)})\.md\b"]
    + [re.escape("/".join(parts)) for parts in OUTSIDE_PATHS]))

SECTION = r"§\d+(?:\.\d+)*"
#: One citation: an optional page (or RFC), then one or more sections ("§4.4-§4.6", "§2 and §4.8").
CITATION = re.compile(rf"(?:(?P<page>(?:docs/)?[\w./-]+\.md|RFC ?\d+)\s+)?"
                      rf"(?P<sections>{SECTION}(?:\s*(?:,|-|–|and|or|/)\s*{SECTION})*)")
MD_LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]+\.md\b")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")


def _text_files() -> Iterator[Path]:
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for path in sorted(folder.iterdir()):
            if path.name in SKIPPED_DIRS or path.name.endswith(".egg-info") or path.is_symlink():
                continue  # a worktree's .git is a file; links repeat what they point at
            if path.is_dir():
                stack.append(path)
            elif path.is_file():
                yield path


@functools.cache
def _read(path: Path) -> str | None:
    """The file as text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


#: Every text file of the tree but this one, whose own examples are checked in test_the_checker_sees_what_it_must.
FILES = [p for p in _text_files() if _read(p) is not None and p != Path(__file__).resolve()]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    number: str | None
    anchor: str


@functools.cache
def _headings(path: Path) -> tuple[Heading, ...]:
    found: list[Heading] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in (_read(path) or "").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = HEADING.match(line)
        if fenced or not match:
            continue
        title = match.group(2)
        slug = _slug(title)
        anchor = slug if slug not in seen else f"{slug}-{seen[slug]}"
        seen[slug] = seen.get(slug, 0) + 1
        number = NUMBER.match(title)
        found.append(Heading(len(match.group(1)), title, number.group(1) if number else None, anchor))
    return tuple(found)


def _sections(path: Path) -> set[str]:
    return {h.number for h in _headings(path) if h.number}


def _anchors(path: Path) -> dict[str, Heading]:
    return {h.anchor: h for h in _headings(path)}


def _without_code(text: str) -> str:
    """Markdown with fenced code blocks blanked (offsets and line numbers kept)."""
    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            out.append("\n" if line.endswith("\n") else "")
        else:
            out.append(re.sub(r"[^\n]", " ", line) if fenced else line)
    return "".join(out)


def _page_of(name: str, citing: Path) -> Path:
    """The page a citation names: ``docs/x.md`` from the root, ``x.md`` beside a page (else in docs/)."""
    if name.startswith("docs/"):
        return ROOT / name
    base = citing.parent if citing.suffix == ".md" and DOCS in citing.parents else DOCS
    return base / name


def _check_citations(path: Path, text: str, default_page: Path | None, offset: int, problems: list[str]) -> None:
    for match in CITATION.finditer(text):
        page_name = match.group("page")
        where = f"{_rel(path)}:{_line(_read(path) or '', offset + match.start())}"
        if page_name and page_name.startswith("RFC"):
            continue
        if page_name:
            page = _page_of(page_name, path)
        elif default_page is not None:
            page = default_page
        else:
            problems.append(f"{where}: {match.group(0)!r} does not name the page it cites (docs/<page>.md §N)")
            continue
        if not page.is_file():
            problems.append(f"{where}: {match.group(0)!r} cites a page that does not exist")
            continue
        for number in re.findall(r"§(\d+(?:\.\d+)*)", match.group("sections")):
            if number not in _sections(page):
                problems.append(f"{where}: §{number} is not a numbered heading of {_rel(page)}")


def _markdown_links(path: Path, text: str, problems: list[str]) -> str:
    """Check every relative link and its anchor; return the text with link texts blanked."""
    blanked = list(text)
    for match in MD_LINK.finditer(text):
        target = match.group("target")
        where = f"{_rel(path)}:{_line(text, match.start())}"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if ROOT not in linked.parents and linked != ROOT:
            problems.append(f"{where}: link {target!r} leaves the repository")
            continue
        if not linked.exists():
            problems.append(f"{where}: link {target!r} points at nothing")
            continue
        page = linked if linked.suffix == ".md" else None
        heading = None
        if anchor and page is not None:
            heading = _anchors(page).get(anchor)
            if heading is None:
                problems.append(f"{where}: link {target!r}: no heading with that anchor in {_rel(page)}")
        if page is not None:
            _check_citations(path, match.group("text"), page, match.start(), problems)
            numbers = re.findall(r"§(\d+(?:\.\d+)*)", match.group("text"))
            if heading is not None and len(numbers) == 1 and heading.number != numbers[0]:
                problems.append(f"{where}: link text says §{numbers[0]} but {target!r} is §{heading.number}")
        for i in range(match.start("text"), match.end("text")):
            if blanked[i] != "\n":
                blanked[i] = " "
    return "".join(blanked)


def test_nothing_cites_a_document_or_path_outside_the_repository() -> None:
    problems = []
    for path in FILES:
        text = _read(path) or ""
        for match in OUTSIDE.finditer(text):
            problems.append(f"{_rel(path)}:{_line(text, match.start())}: cites {match.group(0)!r}")
    assert not problems, "\n".join(problems)


def test_every_section_citation_and_link_lands_on_a_heading_that_exists() -> None:
    problems: list[str] = []
    for path in FILES:
        text = _read(path) or ""
        if "§" not in text and "](" not in text and "docs/" not in text:
            continue
        for match in DOCS_PATH.finditer(text):
            if not (ROOT / match.group(0)).is_file():
                problems.append(f"{_rel(path)}:{_line(text, match.start())}: {match.group(0)} does not exist")
        if path.suffix == ".md":
            visible = _markdown_links(path, _without_code(text), problems)
            own = path if DOCS in path.parents else None
            _check_citations(path, visible, own, 0, problems)
        else:
            _check_citations(path, text, None, 0, problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")))
def test_section_numbers_are_unique_and_nested(page: str) -> None:
    """So that a number names one section, and §4.5 is found under §4."""
    headings = [h for h in _headings(DOCS / page) if h.number]
    numbers = [h.number for h in headings]
    assert len(numbers) == len(set(numbers)), f"repeated section numbers in {page}: {numbers}"
    parents: dict[int, str] = {}
    for h in headings:
        parents[h.level] = h.number
        if "." in h.number:
            parent = parents.get(h.level - 1)
            assert parent == h.number.rsplit(".", 1)[0], f"{page}: §{h.number} is not under §{h.number.rsplit('.', 1)[0]}"


def test_the_checker_sees_what_it_must() -> None:
    """The rules above, on known text: a wrong section, a missing page, an unnamed page, an outside file."""
    problems: list[str] = []
    sample = ROOT / "README.md"
    _check_citations(sample, "see docs/protocol.md §4.5 and docs/protocol.md §99; docs/nope.md §1; §4.8; RFC 6455 §5.1",
                     None, 0, problems)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "§99 is not a numbered heading of docs/protocol.md",
        "'docs/nope.md §1' cites a page that does not exist",
        "'§4.8' does not name the page it cites (docs/<page>.md §N)",
    ]
    assert OUTSIDE.search("as " + "platform" + ".md says") and not OUTSIDE.search("cross-platform markdown")
    assert {"4.5", "4.8", "9.3"} <= _sections(DOCS / "protocol.md")
