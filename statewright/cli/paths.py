"""``statewright paths``: the transition cover (or every simple path) of a machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import DEFINITION_SUFFIXES, load_app
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, err, escape, out
from statewright.errors import InvalidInput

if TYPE_CHECKING:
    from statewright.definition import Machine


def _machine(s: Settings, target: str) -> Machine:
    from statewright.definition import Machine, load_path

    if target.lower().endswith(DEFINITION_SUFFIXES) or Path(target).is_file():
        if not Path(target).is_file():
            raise InvalidInput(f"no such file {target!r}")
        return load_path(target)
    # A workflow type by name: --app's types, or the built-in agent task. No store needed.
    from statewright.engine import agent_task_type

    for loaded in [*load_app(s.app), agent_task_type()]:
        machine = loaded if isinstance(loaded, Machine) else loaded.machine
        if machine.name == target:
            return machine
    raise InvalidInput(
        f"{target!r} is neither a definition file (.json, .yaml, .yml) nor a workflow type "
        "(load yours with --app)"
    )


def paths(
    s: Settings,
    target: Annotated[
        str,
        typer.Argument(
            metavar="FILE|TYPE",
            help="A .json/.yaml machine definition, or a workflow type (built-in or --app).",
            show_default=False,
        ),
    ],
    all_paths: Annotated[
        bool,
        typer.Option(
            "--all", help="Every simple path (no state twice) instead of the transition cover."
        ),
    ] = False,
    max_length: Annotated[
        int | None,
        typer.Option("--max-length", min=0, help="With --all: only paths of at most N steps."),
    ] = None,
) -> None:
    """Print event sequences that take every transition at least once (one per line).

    Guards are not evaluated: a sequence names edges (guards shown in brackets); a test
    driving it supplies payloads that pass them. Transitions that cannot be reached from
    the initial state are listed on stderr.
    """
    from statewright.testing.paths import format_path, simple_paths, transition_cover

    machine = _machine(s, target)
    if all_paths:
        found = simple_paths(machine, max_length=max_length)
        if s.json:
            emit_json(
                {
                    "machine": machine.name,
                    "version": machine.version,
                    "paths": [[step.to_dict() for step in p] for p in found],
                }
            )
            return
        for p in found:
            out.print(escape(format_path(p) or machine.initial.name))
        return
    cover = transition_cover(machine)
    if s.json:
        emit_json({**cover.to_dict(), "version": machine.version})
        return
    for seq in cover:
        out.print(escape(format_path(seq)))
    for step in cover.unreachable:  # on stderr: stdout stays one sequence per line
        err.print(f"[yellow]unreachable:[/] {escape(str(step))}")
