"""MkDocs hooks (``hooks:`` in mkdocs.yml): the README as the home page, every ADR in the nav.

The README links into the site as ``docs/<page>.md``, which is right on a repository browser; on the
site the same page is ``<page>.md``. Pages link back to the README as ``../README.md`` (from
``docs/guides/``: ``../../README.md``), which on the site is the home page. Rewriting both kinds of link
here keeps one README for both, and lets ``mkdocs build --strict`` check its links and anchors like
every other page's.

Every other page must be listed in mkdocs.yml's nav (a page left out fails the strict build), except
the numbered ADRs: each ``docs/adr/NNNN-*.md`` is added after the nav's ``adr/README.md``, so a new
decision needs no second edit.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

README = Path(__file__).resolve().parents[1] / "README.md"
ADR_FOLDER = README.parent / "docs" / "adr"
ADR_INDEX = "adr/README.md"
HOME = "index.md"
_DOCS_LINK = re.compile(r"\]\(docs/")
_LINK_TARGET = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def home_page(readme: str) -> str:
    """The README with its ``](docs/...)`` links made relative to the docs folder."""
    return _DOCS_LINK.sub("](", readme)


def readme_links_to_home(markdown: str, page: str) -> str:
    """``markdown`` of ``page`` (a path under docs/) with its links to the README pointed at the home page."""
    folder = posixpath.dirname(page)

    def point(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target or posixpath.normpath(posixpath.join("docs", folder, target)) != "README.md":
            return match.group(0)
        return f"]({posixpath.relpath(HOME, folder or '.')}{anchor})"

    return _LINK_TARGET.sub(point, markdown)


def with_every_adr(nav: list[Any], adrs: list[str]) -> list[Any]:
    """``nav`` with ``adrs`` (paths under docs/) that it does not list put right after ``ADR_INDEX``."""

    def listed(items: list[Any]) -> set[str]:
        found: set[str] = set()
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                found |= listed(value) if isinstance(value, list) else {str(value)}
        return found

    missing = [adr for adr in adrs if adr not in listed(nav)]

    def insert(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                item = {
                    key: insert(value) if isinstance(value, list) else value for key, value in item.items()
                }
            out.append(item)
            if ADR_INDEX in (item.values() if isinstance(item, dict) else [item]):
                out.extend(missing)
        return out

    return insert(nav)


def on_config(config: Any) -> Any:
    adrs = sorted(f"adr/{path.name}" for path in ADR_FOLDER.glob("[0-9][0-9][0-9][0-9]-*.md"))
    config["nav"] = with_every_adr(config["nav"], adrs)
    return config


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, HOME, content=home_page(README.read_text())))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    return readme_links_to_home(markdown, page.file.src_uri)
