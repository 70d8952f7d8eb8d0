"""Writes docs/reference/cli.md from the ``statewright`` command tree (Typer/Click).

Run ``python -m tests.docs.gen_cli`` after changing a command or option; the test
(``test_cli_reference.py``) fails while the page misses one.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import typer.main
from typer import _click as click  # typer 0.29 carries its own click
from typer.core import TyperArgument, TyperGroup, TyperOption

from statewright.cli.main import app
from tests.docs.pages import REFERENCE


def root() -> click.Command:
    return typer.main.get_command(app)


def walk(
    cmd: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command, ``(path, command)``, groups first, in the order ``--help`` lists them."""
    yield path, cmd
    if isinstance(cmd, TyperGroup):
        ctx = click.Context(cmd, info_name="statewright")
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))


def title(path: tuple[str, ...]) -> str:
    return " ".join(("statewright", *path))


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _paragraphs(text: str) -> str:
    paras = [" ".join(p.split()) for p in text.strip().split("\n\n") if p.strip()]
    return "\n\n".join(html.escape(p, quote=False) for p in paras)


def _default(param: click.Parameter) -> str:
    value = param.default
    if value is None or value is False or value == () or callable(value):
        return ""
    if getattr(param, "is_flag", False) and value is True:
        return "on"
    if hasattr(value, "value"):  # an enum
        value = value.value
    return f"`{value}`"


GLOBAL = ("--db", "--app", "--json", "--log-level")
"""The root's options, which every command takes too: documented once, at the root."""


def own_options(path: tuple[str, ...], cmd: click.Command) -> list[TyperOption]:
    """A command's documented options: not its copies of the global ones."""
    return [
        p
        for p in cmd.params
        if isinstance(p, TyperOption) and not p.hidden and not (path and set(p.opts) & set(GLOBAL))
    ]


def section(path: tuple[str, ...], cmd: click.Command) -> str:
    ctx = click.Context(cmd, info_name=title(path))
    lines = [f"## `{title(path)}`", ""]
    if cmd.help:
        lines += [_paragraphs(cmd.help), ""]
    usage = " ".join(_usage(cmd))
    lines += ["```text", f"{title(path)} {usage}".rstrip(), "```", ""]
    arguments = [p for p in cmd.params if isinstance(p, TyperArgument)]
    options = own_options(path, cmd)
    if arguments:
        lines += ["| Argument | Meaning |", "| --- | --- |"]
        for a in arguments:
            meta = a.metavar or (a.name or "").upper()
            code = html.escape(meta).replace("|", "&#124;")
            lines.append(f"| <code>{code}</code> | {_cell(a.help or '')} |")
        lines.append("")
    if options:
        lines += ["| Option | Default | Meaning |", "| --- | --- | --- |"]
        for o in options:
            names = ", ".join(f"`{n}`" for n in (*o.opts, *o.secondary_opts))
            lines.append(f"| {names} | {_default(o)} | {_cell(o.help or '')} |")
        lines.append("")
    if path:
        lines += [
            f"Also the [global options](#statewright) ({', '.join(f'`{g}`' for g in GLOBAL)}).",
            "",
        ]
    if isinstance(cmd, TyperGroup):
        ctx = click.Context(cmd, info_name=title(path))
        subs = [n for n in cmd.list_commands(ctx) if not cmd.get_command(ctx, n).hidden]  # type: ignore[union-attr]
        lines += ["Commands: " + ", ".join(f"[`{n}`](#{_anchor((*path, n))})" for n in subs), ""]
    return "\n".join(lines)


def _usage(cmd: click.Command) -> list[str]:
    pieces = ["[OPTIONS]"]
    for a in cmd.params:
        if isinstance(a, TyperArgument):
            meta = a.metavar or (a.name or "").upper()
            if a.nargs != 1:
                meta += "..."
            pieces.append(meta if a.required or meta.startswith("[") else f"[{meta}]")
    if isinstance(cmd, TyperGroup):
        pieces.append("COMMAND [ARGS]...")
    return pieces


def _anchor(path: tuple[str, ...]) -> str:
    return "-".join(("statewright", *path))


HEADER = """# Command line

`statewright` is installed with the package. Every command takes the global options of
[`statewright`](#statewright) (`--db`, `--app`, `--json`, `--log-level`), before its name
or after it (`statewright --db URL list --json`); `-h` or `--help` prints a command's help.
This page is generated from the commands themselves (`python -m tests.docs.gen_cli`);
`tests/docs/test_cli_reference.py` fails when a command or option is missing from it.
"""


def render() -> str:
    parts = [HEADER]
    for path, cmd in walk(root()):
        parts.append(section(path, cmd))
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    (REFERENCE / "cli.md").write_text(render(), encoding="utf-8")
