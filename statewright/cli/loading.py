"""Where the CLI gets its workflow types and its engine.

``--app`` lists sources, comma-separated:

- ``path/to/file.py`` or ``package.module``: the module's ``TYPES`` list;
- ``file.py:attr`` or ``module:attr``: that attribute, a :class:`WorkflowType`, a
  :class:`Machine`, or a list of them;
- ``machine.json`` / ``machine.yaml``: a definition file, registered without handlers (its
  timers fire; what this process writes is due for the workers that have the handlers:
  :meth:`WorkflowType.has_work`). Next to the machine it may list the context keys
  its workflows keep from agents and non-operators (:attr:`WorkflowType.redact`), a top-level
  ``redact: [stripe_secret_ref, customer.card.number]``; the JSON Schema its starts' input
  must satisfy (:attr:`WorkflowType.input_schema`), ``input_schema: {...}``; and its
  ``budgets`` (:mod:`statewright.engine.budgets`).

The built-in ``agent_task`` machine is always registered (an app may replace it).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from statewright.cli.options import Settings
from statewright.errors import InvalidInput

# The engine, the store and the definition formats are imported by the functions that use
# them: command modules import this one, and `statewright --help` should not load them.
if TYPE_CHECKING:
    from statewright.clock import Clock
    from statewright.definition import Machine
    from statewright.engine import Engine, WorkflowType

T = TypeVar("T")
Loaded: TypeAlias = "WorkflowType | Machine"
DEFINITION_SUFFIXES = (".json", ".yaml", ".yml")


def load_app(spec: str | None) -> list[Loaded]:
    """The workflow types named by an ``--app`` value (see the module docstring)."""
    found: list[Loaded] = []
    for item in (part.strip() for part in (spec or "").split(",")):
        if item:
            found += _load_one(item)
    return found


def _load_one(item: str) -> list[Loaded]:

    if item.lower().endswith(DEFINITION_SUFFIXES):
        return [file_type(_existing(item))]
    target, _, attr = item.partition(":")
    if target.endswith(".py"):
        module = import_file(_existing(target))
    else:
        module = _import_module(target)
    if attr:
        if not hasattr(module, attr):
            raise InvalidInput(f"--app {item!r}: {target!r} has no attribute {attr!r}")
        return _collect(getattr(module, attr), item)
    if not hasattr(module, "TYPES"):
        raise InvalidInput(
            f"--app {item!r}: the module has no TYPES list; name an attribute with {target}:attr"
        )
    return _collect(module.TYPES, item)


def load_definition(path: str | Path) -> tuple[Machine, tuple[str, ...]]:
    """A definition file's machine, and the ``redact`` list it may hold beside it."""
    machine, options = read_definition(path)
    return machine, tuple(options.get("redact", ()))


TYPE_OPTIONS = ("redact", "budgets", "input_schema", "search_attributes")
"""The type options a definition file may hold beside its machine (``load_path`` reads the
machine alone and ignores them; :func:`file_type` makes them a :class:`WorkflowType`)."""


def read_definition(path: str | Path) -> tuple[Machine, dict[str, Any]]:
    """A definition file's machine, and the type options it holds beside it, as
    :class:`WorkflowType` arguments: ``redact``, ``budgets`` (see
    :mod:`statewright.engine.budgets`), ``input_schema`` and ``search_attributes``."""
    import yaml

    from statewright.definition import from_dict, load_path

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        data = None  # load_path says what is wrong
    if not isinstance(data, dict) or not any(k in data for k in TYPE_OPTIONS):
        return load_path(p), {}
    given = {k: data.pop(k) for k in TYPE_OPTIONS if k in data}
    options: dict[str, Any] = {}
    redact = given.get("redact", [])
    if not isinstance(redact, list) or not all(isinstance(r, str) for r in redact):
        raise InvalidInput(f"{str(p)!r}: 'redact' must be a list of context keys or dotted paths")
    if redact:
        options["redact"] = tuple(redact)
    if "budgets" in given:  # (checked here, by name, rather than by the document's schema)
        from statewright.engine.budgets import budgets_from_json

        options["budgets"] = budgets_from_json(given["budgets"])
    if given.get("input_schema") is not None:  # checked as a schema by WorkflowType
        options["input_schema"] = given["input_schema"]
    if given.get("search_attributes"):  # checked as names by WorkflowType
        options["search_attributes"] = given["search_attributes"]
    return from_dict(data), options


def file_type(path: str | Path) -> Loaded:
    """The type a definition file declares: its machine, or a WorkflowType with the file's
    ``redact``, ``budgets``, ``input_schema`` and ``search_attributes`` (checked against the
    machine: DefinitionError)."""
    from statewright.engine import WorkflowType

    machine, options = read_definition(path)
    if not options:
        return machine
    return WorkflowType(machine, **options)


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"--app: no such file {path!r}")
    return p


def import_file(path: Path) -> ModuleType:
    """Import a Python file as a module (cached by its resolved path)."""
    path = path.resolve()
    name = f"_statewright_app_{path.stem}_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidInput(f"--app: cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    # Like `python file.py`: the file's folder is importable, so it may import its siblings.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise InvalidInput(f"--app: importing {str(path)!r} failed: {exc}") from exc
    return module


def _import_module(name: str) -> ModuleType:
    # A console script does not have the working directory on sys.path; `--app myapp`
    # should find ./myapp.py as `python -m` would.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InvalidInput(f"--app: cannot import module {name!r}: {exc}") from exc


def _collect(obj: Any, item: str) -> list[Loaded]:
    from statewright.definition import Machine
    from statewright.engine import WorkflowType

    if isinstance(obj, WorkflowType | Machine):
        return [obj]
    if isinstance(obj, list | tuple) and all(isinstance(x, WorkflowType | Machine) for x in obj):
        return list(obj)
    raise InvalidInput(
        f"--app {item!r}: expected a WorkflowType, a Machine or a list of them, "
        f"got {type(obj).__name__}"
    )


def build_engine(settings: Settings, clock: Clock | None = None) -> Engine:
    """An engine on ``--db`` with the built-in machine and the ``--app`` types registered."""
    from statewright.engine import Engine, agent_task_type
    from statewright.store import store_from_url

    types = load_app(settings.app)
    engine = Engine(store_from_url(settings.db), clock=clock)
    engine.register(agent_task_type(), *types)
    return engine


def with_engine(settings: Settings, fn: Callable[[Engine], Awaitable[T]]) -> T:
    """Open the engine, run ``fn`` on it, close it: one command's whole life."""
    import asyncio

    engine = build_engine(settings)

    async def go() -> T:
        async with engine:
            return await fn(engine)

    return asyncio.run(go())


def db_path(engine: Engine) -> str:
    """The store's file, absolute, for messages; a server's ``dbname@host:port`` (never its
    credentials) when it has no file."""
    path = getattr(engine.store, "path", None)
    if path is None:
        return str(getattr(engine.store, "where", type(engine.store).__name__))
    if not isinstance(path, str) or path == ":memory:":
        return str(path)
    return str(Path(path).resolve())
