"""The generated references stay true: every setting has a description, and the committed pages are what
``tools/docs_reference.py`` renders from the source now (``make docs`` rewrites them)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from tools import docs_reference
from tools.docs_reference import BEGIN, PAGES, REGENERATE, stale_pages, undescribed_settings


def test_every_setting_and_section_has_a_description() -> None:
    missing = undescribed_settings()
    assert missing == [], (
        f"give these a Field(description=...) (or the section a docstring) in config.py: {missing}"
    )


def test_the_generated_pages_are_current() -> None:
    assert stale_pages() == [], f"regenerate with {REGENERATE} and commit the pages"


def test_a_setting_without_a_description_is_reported() -> None:
    class Section(BaseModel):
        """A section."""

        described: int = Field(1, description="Has one.")
        bare: int = 2

    class Undocumented(BaseModel):
        value: int = Field(1, description="Described, in a section without a docstring.")

    class Root(BaseModel):
        top: str = "x"
        section: Section = Section()
        other: Undocumented = Undocumented()

    assert undescribed_settings(Root) == ["top", "section.bare", "[zerobus.other]"]


def test_an_edit_inside_the_generated_part_is_reported(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    for page in PAGES:
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(docs_reference.DOCS / page, docs / page)
    page = docs / "configuration.md"
    text = page.read_text()
    page.write_text(text.replace("| `min_streams`", "| `min_stream`", 1))
    assert stale_pages(docs) == ["docs/configuration.md"]
    page.write_text(text.replace(BEGIN, f"A hand-written line above the markers.\n\n{BEGIN}"))
    assert stale_pages(docs) == [], "the hand-written part is not the generator's"


def test_every_setting_appears_in_the_configuration_reference() -> None:
    text = (docs_reference.DOCS / "configuration.md").read_text()
    absent = [key for key, _ in docs_reference.settings() if f"`{docs_reference._env_name(key)}" not in text]
    assert absent == []
