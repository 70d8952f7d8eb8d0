"""The README's own blocks run as pasted (in a scratch directory), like the site's pages'
(``test_docs.py``; ``docblocks.py`` says how a block is marked), and its links into the docs
lead to pages that exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.docblocks import ROOT, blocks, run_blocks

README = ROOT / "README.md"


def test_readme_has_a_python_example() -> None:
    assert [b for b in blocks(README) if b.lang == "python"]


def test_readme_blocks_run(tmp_path: Path) -> None:
    run_blocks(blocks(README), tmp_path)


def test_readme_keeps_the_two_commands() -> None:
    text = README.read_text()
    assert "./scripts/demo    # set up .venv, run the example workflows on SQLite" in text
    assert "./scripts/test    # set up .venv with test tools, run the whole test suite" in text


def test_readme_links_to_docs_pages_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())
    assert links
    assert all((ROOT / link).is_file() for link in links), [
        link for link in links if not (ROOT / link).is_file()
    ]
