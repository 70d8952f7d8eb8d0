"""Commands on machine definitions: diagram and check. Neither needs a store unless asked."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import DEFINITION_SUFFIXES, file_type, with_engine
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, escape, out
from statewright.errors import DefinitionError, InvalidInput

if TYPE_CHECKING:
    from statewright.definition import Machine
    from statewright.engine import Engine


class DiagramFormat(enum.StrEnum):
    mermaid = "mermaid"
    dot = "dot"


def _load_file(path: str) -> Machine:
    return _load_type(path)[0]


def _load_type(path: str) -> tuple[Machine, bool]:
    """A definition file's machine, and whether it declares an ``input_schema``."""
    machine, has_schema, _ = _load_options(path)
    return machine, has_schema


def _load_options(path: str) -> tuple[Machine, bool, tuple[str, ...]]:
    """A definition file's machine, whether it declares an ``input_schema``, and its search
    attributes."""
    if not Path(path).is_file():
        raise InvalidInput(f"no such file {path!r}")
    # (a file may list its type's redact keys, budgets and input schema beside: checked with
    # the machine)
    from statewright.engine import WorkflowType

    loaded = file_type(path)
    if isinstance(loaded, WorkflowType):
        return loaded.machine, loaded.input_schema is not None, loaded.search_attributes
    return loaded, False, ()


def _is_file(target: str) -> bool:
    return target.lower().endswith(DEFINITION_SUFFIXES) or Path(target).is_file()


def diagram(
    s: Settings,
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="[TYPE|FILE]",
            help="A registered workflow type, or a .json/.yaml definition file. "
            "Optional with --id (the workflow's own type).",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        DiagramFormat, typer.Option("--format", help="Diagram language.")
    ] = DiagramFormat.mermaid,
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Mark this workflow's current state.")
    ] = None,
) -> None:
    """Print a machine as a Mermaid or Graphviz DOT diagram."""
    if target is None and workflow_id is None:
        raise InvalidInput("name a workflow type or definition file, or pass --id")
    file_machine = _load_file(target) if target and _is_file(target) else None

    async def resolve(engine: Engine) -> tuple[Machine, str | None]:
        row = await engine.get(workflow_id) if workflow_id else None
        if file_machine is not None:
            machine = file_machine
        else:
            name = target or (row.type if row else "")
            version = row.machine_version if row and row.type == name else None
            machine = engine.type_of(name, version).machine
        if row is not None and row.type != machine.name:
            raise InvalidInput(f"workflow {row.id!r} is a {row.type!r}, not a {machine.name!r}")
        return machine, row.state if row else None

    if file_machine is not None and workflow_id is None:
        machine, current = file_machine, None
    else:
        machine, current = with_engine(s, resolve)
    from statewright.definition import to_dot, to_mermaid

    render = to_dot if fmt is DiagramFormat.dot else to_mermaid
    text = render(machine, current)
    if s.json:
        emit_json(
            {
                "machine": machine.name,
                "version": machine.version,
                "format": fmt.value,
                "current": current,
                "diagram": text,
            }
        )
    else:
        sys.stdout.write(text)


def check(
    s: Settings,
    file: Annotated[str, typer.Argument(help="A .json, .yaml or .yml machine definition.")],
) -> None:
    """Validate a machine definition file: OK with a summary, or every problem (exit 1)."""
    try:
        machine, has_input_schema, search_attributes = _load_options(file)
    except DefinitionError as exc:
        problems = [
            {"code": p.code, "message": p.message, "state": p.state, "event": p.event}
            for p in exc.problems
        ]
        if s.json:
            emit_json({"ok": False, "file": file, "problems": problems})
        else:
            out.print(f"[red]{escape(file)}: {len(problems)} problem(s)[/]")
            for p in exc.problems:
                out.print(f"  [bold]{escape(p.code)}[/]: {escape(p.message)}")
        raise typer.Exit(1) from None
    compounds = machine.tree.compounds.values() if machine.tree is not None else ()
    summary = {
        "ok": True,
        "file": file,
        "machine": machine.name,
        "version": machine.version,
        "states": len(machine.states),
        "events": len(machine.events),
        "transitions": len(machine.transitions),
        "initial": machine.initial.name,
        "terminal": list(machine.terminal_states),
        "guarded": sum(1 for t in machine.transitions if t.guard is not None),
        # Both kinds: one-shot (after) and recurring (every).
        "timers": sum(
            len(st.after) + len(st.every) for st in (*machine.states.values(), *compounds)
        ),
        "compound_states": list(machine.tree.compounds if machine.tree is not None else ()),
        "input_schema": has_input_schema,
        "search_attributes": list(search_attributes),
    }
    if s.json:
        emit_json(summary)
        return
    out.print(
        f"[green]OK[/] {escape(file)}: machine [bold]{escape(machine.name)}[/] "
        + escape(
            f"v{machine.version}: {summary['states']} states, {summary['events']} events, "
            f"{summary['transitions']} transitions ({summary['guarded']} guarded), "
            f"{summary['timers']} timer(s); initial {machine.initial.name}, "
            + (f"compound {', '.join(machine.tree.compounds)}, " if machine.tree else "")
            + f"terminal {', '.join(machine.terminal_states)}"
            + ("; input schema" if has_input_schema else "")
            + (f"; search attributes {', '.join(search_attributes)}" if search_attributes else "")
        )
    )
