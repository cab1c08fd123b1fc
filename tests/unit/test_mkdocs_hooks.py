"""The site's hooks: the README's links work from the home page, pages' links to the README reach it,
and a numbered ADR joins the nav without an edit to mkdocs.yml."""

from __future__ import annotations

from tools.mkdocs_hooks import home_page, readme_links_to_home, with_every_adr


def test_the_readmes_docs_links_are_made_relative_to_the_site() -> None:
    readme = "[guide](docs/guides/dagster.md#quickstart) and [site](https://docs.databricks.com/docs/x)"
    assert (
        home_page(readme)
        == "[guide](guides/dagster.md#quickstart) and [site](https://docs.databricks.com/docs/x)"
    )


def test_a_pages_link_to_the_readme_points_at_the_home_page() -> None:
    page = "see [it](../../README.md#what-you-can-rely-on), [cli](../cli.md) and [x](https://e.org/README.md)"
    assert readme_links_to_home(page, "guides/write-modes.md") == (
        "see [it](../index.md#what-you-can-rely-on), [cli](../cli.md) and [x](https://e.org/README.md)"
    )
    assert readme_links_to_home("[home](../README.md)", "errors.md") == "[home](index.md)"


def test_unlisted_adrs_follow_the_decisions_page() -> None:
    nav = [{"Home": "index.md"}, {"Architecture": [{"Decisions": "adr/README.md"}, "adr/0001-a.md"]}]
    assert with_every_adr(nav, ["adr/0001-a.md", "adr/0002-b.md"]) == [
        {"Home": "index.md"},
        {"Architecture": [{"Decisions": "adr/README.md"}, "adr/0002-b.md", "adr/0001-a.md"]},
    ]
