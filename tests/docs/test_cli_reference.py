"""docs/reference/cli.md names every command and option of ``statewright`` (the Typer/Click
command tree walked here); regenerate it with ``python -m tests.docs.gen_cli``."""

from __future__ import annotations

import re

from typer.core import TyperArgument, TyperOption

from tests.docs.gen_cli import GLOBAL, root, title, walk
from tests.docs.pages import code_spans, page

PAGE = page("cli.md")


def _sections() -> dict[str, str]:
    """Heading title (``statewright send``) -> the section's text."""
    parts = re.split(r"^## `([^`]+)`\s*$", PAGE, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_option_is_on_the_page() -> None:
    sections = _sections()
    missing: list[str] = []
    commands = list(walk(root()))
    assert len(commands) > 40  # the tree was walked (groups included)
    for path, cmd in commands:
        name = title(path)
        if name not in sections:
            missing.append(name)
            continue
        spans = code_spans(sections[name])
        for param in cmd.params:
            if isinstance(param, TyperOption) and not param.hidden:
                where = spans
                if path and set(param.opts) & set(GLOBAL):
                    where = code_spans(sections["statewright"])  # documented once, at the root
                missing += [
                    f"{name} {o}" for o in (*param.opts, *param.secondary_opts) if o not in where
                ]
            elif isinstance(param, TyperArgument):
                meta = param.metavar or (param.name or "").upper()
                if meta not in spans:
                    missing.append(f"{name} {meta}")
    assert missing == [], f"not in docs/reference/cli.md: {missing}"


def test_the_page_has_no_command_the_app_lacks() -> None:
    known = {title(path) for path, _ in walk(root())}
    assert set(_sections()) - known == set()
