"""Docstrings and comments cite documents in this repository, never ones outside it.

Design background kept outside the repository (a design file, a reference folder, a shared folder)
is a dead end for a reader of the code; citations point at docs/architecture.md or docs/adr/.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEARCHED = (
    "zerobus_orchestration",
    "dagster_defs",
    "airflow_provider",
    "tests",
    "benchmarks",
    "examples",
    "docs",
    "tools",
)
SUFFIXES = {".py", ".md", ".proto", ".toml", ".yml", ".yaml"}
# Built from parts so this file does not cite what it forbids.
OUTSIDE = re.compile(
    "|".join(
        [
            r"DESIGN" + r"\.md",
            r"\breference" + r"/",
            r"\breference" + r" §",
            r"\bdesign" + r" §",
            r"\bshared" + r"/reference",
            # A bare name; the repository's own guides are cited with their folder (docs/guides/dagster.md,
            # or ./dagster.md beside it), which a slash before the name tells apart.
            r"(?<![\w/-])(?:zerobus-protocol|tables-and-catalog|dagster|airflow)" + r"\.md\b",
            r"\(§\d",
        ]
    ),
    re.IGNORECASE,
)
LINK = re.compile(r"\bdocs/([a-z0-9_/-]+\.md)(#[a-z0-9_-]+)?")


def _files() -> list[Path]:
    files = [REPO / "README.md"]
    for top in SEARCHED:
        files += [p for p in (REPO / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if "__pycache__" not in p.parts]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "cite docs/architecture.md or docs/adr/ instead:\n" + "\n".join(offenders)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but ``_`` and ``-`` dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^a-z0-9_ -]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_docs_citation_points_at_an_existing_file_and_section() -> None:
    broken = []
    for path in _files():
        for match in LINK.finditer(path.read_text(errors="replace")):
            target = REPO / "docs" / match.group(1)
            if not target.is_file():
                broken.append(f"{path.relative_to(REPO)}: {match.group(0)} (no such file)")
            elif match.group(2) and match.group(2)[1:] not in _anchors(target.read_text()):
                broken.append(f"{path.relative_to(REPO)}: {match.group(0)} (no such section)")
    assert not broken, "\n".join(broken)
