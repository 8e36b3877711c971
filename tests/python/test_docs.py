"""The README and the reference in docs/: every relative link resolves to a
file, and every `#anchor` to a heading of it; the README stays short."""

import os
import re

from conftest import ROOT

PAGES = ["README.md", "SECURITY.md", "ARCHITECTURE.md"] + [
    f"docs/{p}" for p in sorted(os.listdir(ROOT / "docs")) if p.endswith(".md")
]


def anchor(heading):
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def test_every_link_resolves():
    broken = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, fragment = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            if not file.exists():
                broken.append((page, target))
            elif fragment and file.suffix == ".md":
                headings = [anchor(h) for h in re.findall(r"^#+ (.*)", file.read_text(), re.M)]
                if fragment not in headings:
                    broken.append((page, target))
    assert not broken, broken


def test_the_readme_is_read_in_minutes():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines < 250, f"the README has {lines} lines: the reference belongs in docs/"


def test_the_book_has_every_page_of_docs():
    # docs/ is an mdBook (`make book`; `make test` builds it): a page left
    # out of its SUMMARY.md would be missing from the book.
    summary = (ROOT / "docs" / "SUMMARY.md").read_text()
    listed = set(re.findall(r"\]\(([^)]+\.md)\)", summary))
    pages = {p for p in os.listdir(ROOT / "docs") if p.endswith(".md") and p != "SUMMARY.md"}
    assert pages == listed, (pages - listed, listed - pages)


def test_the_architecture_is_a_map_of_every_folder():
    # ARCHITECTURE.md is a map, not a log: short, and naming every folder
    # of the engine and the server.
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert text.count("\n") < 300, "ARCHITECTURE.md is a map: keep it under 300 lines"
    for crate in ["engine", "server"]:
        src = ROOT / "gateway" / crate / "src"
        for entry in sorted(os.listdir(src)):
            if (src / entry).is_dir():
                assert f"`{entry}/`" in text, f"ARCHITECTURE.md does not map gateway/{crate}/src/{entry}/"
