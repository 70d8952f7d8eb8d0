"""Every code block of the documentation site runs (or is checked, or says why not), as a
reader would paste it: the pages in the order of the site's navigation, one scratch folder
for all of them. ``docs/reference/`` is left to ``tests/docs/``, which runs its blocks itself.
See ``docblocks.py`` for how a page marks what a block is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.docblocks import OUTPUTS, ROOT, blocks, run_blocks, unhandled

DOCS = ROOT / "docs"


def nav_pages() -> list[Path]:
    """The pages of mkdocs.yml's nav, in order."""

    def walk(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for v in node.values() for p in walk(v)]
        if isinstance(node, list):
            return [p for v in node for p in walk(v)]
        raise AssertionError(f"unexpected nav entry {node!r}")

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return [DOCS / p for p in walk(config["nav"])]


def site_pages() -> list[Path]:
    return [p for p in nav_pages() if not p.relative_to(DOCS).parts[0] == "reference"]


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    pages = nav_pages()
    assert all(p.is_file() for p in pages), [p for p in pages if not p.is_file()]
    on_disk = {
        p
        for p in DOCS.rglob("*.md")
        if p.relative_to(DOCS).parts[0] not in ("reference", "_incoming")
    }
    assert on_disk <= set(pages), sorted(map(str, on_disk - set(pages)))


def test_every_block_is_run_checked_or_says_why_not() -> None:
    """Fails fast, before anything runs, on a block nobody would run."""
    problems = [
        f"{b.where}: {why}" for p in site_pages() for b in blocks(p) if (why := unhandled(b))
    ]
    assert not problems, "\n".join(problems)


def test_docs_blocks_run(tmp_path: Path) -> None:
    found = [b for p in site_pages() for b in blocks(p)]
    assert [b for b in found if b.lang == "python"]
    checked = run_blocks(found, tmp_path)
    # Every known output met its block: a block renamed or moved out of the docs fails here.
    assert checked == set(range(len(OUTPUTS))), sorted(set(range(len(OUTPUTS))) - checked)


def test_a_block_nobody_runs_must_say_why(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```\nno language\n```\n\n```console\n$ statewright serve\n```\n\n"
        "<!-- not run: -->\n```bash\nstatewright serve\n```\n\n"
        "<!-- not run: starts a server -->\n```bash\nstatewright serve\n```\n\n"
        "```text\nan output\n```\n"
    )
    found = blocks(page)
    assert [b.line for b in found] == [1, 5, 10, 15, 19]
    problems = [unhandled(b) for b in found]
    assert problems[0] and problems[1] and problems[2]  # no language, console, no reason
    assert problems[3:] == [None, None]
    with pytest.raises(AssertionError, match="neither run nor checked"):
        run_blocks(found, tmp_path)


def test_a_block_runs_as_pasted_and_its_shown_output_is_checked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    saved = "<!-- file: shop_helper.py -->\n```python\nNAME = 'shop'\n```\n\n"
    shown = "```python\nfrom shop_helper import NAME\nprint(NAME)\n```\n\n<!-- output -->\n"
    page.write_text(saved + shown + "```text\nshop\n```\n")
    assert run_blocks(blocks(page), tmp_path) == set()
    assert (tmp_path / "shop_helper.py").read_text() == "NAME = 'shop'\n"
    page.write_text(saved + shown + "```text\nanother shop\n```\n")
    with pytest.raises(AssertionError, match="the block above printed"):
        run_blocks(blocks(page), tmp_path)
    page.write_text("```bash\nfalse\n```\n")
    with pytest.raises(AssertionError, match="exited 1"):
        run_blocks(blocks(page), tmp_path)
