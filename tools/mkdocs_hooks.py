"""MkDocs hooks (``hooks:`` in mkdocs.yml): the site's home page is the repository's README.md.

The README links into the site as ``docs/<page>.md``, which is right on a repository browser; on the
site the same page is ``<page>.md``. Rewriting those links here keeps one README for both, and lets
``mkdocs build --strict`` check its links and anchors like every other page's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[1] / "README.md"
_DOCS_LINK = re.compile(r"\]\(docs/")


def home_page(readme: str) -> str:
    """The README with its ``](docs/...)`` links made relative to the docs folder."""
    return _DOCS_LINK.sub("](", readme)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=home_page(README.read_text())))
    return files
