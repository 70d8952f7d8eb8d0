"""Global options, and the wrapper every command goes through.

The global options (``--db``, ``--app``, ``--json``, ``--log-level``) are accepted before
the command (``statewright --db x show ID``) and after it (``statewright show ID --db x``);
a value given after the command wins. :func:`command` adds them to each command's signature
and is also the top-level error handler, so the CLI runner in tests exercises exactly what
users get.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from statewright.cli.output import fail, logs_to_stderr

DEFAULT_DB = ".statewright/statewright.db"
""":data:`statewright.store.DEFAULT_DB`, for the help text: importing the store would load the
SQLite store's code for every ``--help`` (tests/integration/test_cli_start.py checks that the
two agree)."""
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class Settings:
    """The global options as resolved for one command."""

    db: str | None = None
    """Store URL or SQLite path; None for the default (``DEFAULT_DB``, or the demo's own)."""
    app: str | None = None
    """Comma-separated sources of workflow types (see :mod:`statewright.cli.loading`)."""
    json: bool = False
    """Machine-readable output."""
    log_level: str | None = None
    """None: ``error`` (``info`` for the worker)."""


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="STATEWRIGHT_DB",
        show_envvar=True,
        help=f"SQLite file or store URL (sqlite:///path.db). Default: {DEFAULT_DB}.",
    ),
]
AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="STATEWRIGHT_APP",
        show_envvar=True,
        help="Workflow types to load, comma-separated: file.py, module, module:attr, "
        "or machine definition files (.json/.yaml, no handlers). A module's TYPES list is "
        "used unless an attribute is named.",
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        envvar="STATEWRIGHT_JSON",
        show_envvar=True,
        help="Machine-readable JSON output (errors too, on stderr).",
    ),
]
LogLevelOption = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        envvar="STATEWRIGHT_LOG_LEVEL",
        show_envvar=True,
        help="Log level on stderr: debug, info, warning, error. Default: error (info for "
        "the worker).",
    ),
]


def root_settings(
    db: str | None, app: str | None, as_json: bool, log_level: str | None
) -> Settings:
    return _checked(Settings(db or None, app or None, as_json, log_level))


def _checked(s: Settings) -> Settings:
    if s.log_level is not None and s.log_level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(
            f"{s.log_level!r} is not one of {', '.join(LOG_LEVELS)}", param_hint="--log-level"
        )
    return s


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_GLOBALS: list[tuple[str, Any, Any]] = [
    ("db", DbOption, None),
    ("app", AppOption, None),
    ("as_json", JsonOption, False),
    ("log_level", LogLevelOption, None),
]


def command(fn: Callable[..., None], *, log_level: str = "error") -> Callable[..., None]:
    """Make ``fn(settings, **params)`` a Typer command that also takes the global options.

    ``fn``'s first parameter receives the resolved :class:`Settings`; its other parameters
    are the command's own. Logs go to stderr at ``--log-level`` (default ``log_level``), and
    errors are reported by :func:`statewright.cli.output.fail`.
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    own = list(inspect.signature(fn).parameters.values())[1:]
    params = [
        inspect.Parameter("ctx", _POSITIONAL, annotation=typer.Context),
        *(p.replace(annotation=hints[p.name]) for p in own),
        *(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=ann)
            for name, ann, d in _GLOBALS
        ),
    ]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> None:
        ctx: typer.Context = kwargs.pop("ctx")
        settings = ctx.find_object(Settings) or Settings()
        given = {name: kwargs.pop(name) for name, _, _ in _GLOBALS}
        try:
            # Only values typed after the command override the root's; an environment
            # variable is already in the root's value.
            overrides = {
                ("json" if name == "as_json" else name): value
                for name, value in given.items()
                if _source(ctx, name) == "COMMANDLINE"
            }
            settings = _checked(replace(settings, **overrides))
            ctx.obj = settings
            with logs_to_stderr(settings.log_level or log_level):
                fn(settings, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except Exception as exc:
            raise typer.Exit(fail(exc, as_json=settings.json)) from None

    del wrapper.__wrapped__  # Typer must read the signature below, not fn's
    wrapper.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def _source(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name


class _Plain:
    """Typer's coercion of one parameter's value, without Pydantic where none is needed.

    Typer coerces every value with a Pydantic ``TypeAdapter`` built on first use, so any
    command line would import Pydantic (tens of milliseconds, more than most commands take).
    A missing value, or one already of the parameter's type (``str``, ``bool``; ``int`` or
    ``float`` within its ``min``/``max``), is what that adapter returns unchanged: it is
    returned here. Any other value goes to Typer's own coercion, its messages included.
    """

    def __init__(self, annotation: type, low: float | None, high: float | None) -> None:
        self.annotation = annotation
        self.low = low
        self.high = high

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None or (type(value) is self.annotation and self._in_range(value)):
            return value
        param._runtime_param = None  # Typer's own coercion from now on
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)

    def _in_range(self, value: Any) -> bool:
        if self.annotation in (str, bool):
            return True
        return (self.low is None or value >= self.low) and (
            self.high is None or value <= self.high
        )


class _PlainTexts:
    """:class:`_Plain` for a repeatable ``list[str]`` option (``--where``): none given, or
    texts, are returned as the list Typer's adapter would make of them."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, list | tuple) and all(type(v) is str for v in value):
            return list(value)
        param._runtime_param = None  # Typer's own coercion from now on
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


def plain_coercion(params: Iterable[Any]) -> None:
    """Give the single-valued ``str``, ``bool``, ``int`` and ``float`` parameters :class:`_Plain`
    coercion, and repeatable ``list[str]`` ones :class:`_PlainTexts` (any other parameter, or a
    Typer without these internals, keeps Typer's)."""
    for param in params:
        desc = getattr(param, "type_descriptor", None)
        if desc is None or getattr(param, "_runtime_param", False) is not None:
            continue
        info = desc.parameter_info
        if (
            param.multiple
            and desc.annotation == list[str]
            and desc.file_annotation is None
            and info.parser is None
        ):
            param._runtime_param = _PlainTexts()
            continue
        if (
            desc.annotation in (str, bool, int, float)
            and desc.file_annotation is None
            and info.parser is None
            and not info.clamp
            and not param.multiple
            and param.nargs == 1
        ):
            param._runtime_param = _Plain(desc.annotation, info.min, info.max)


class Command(TyperCommand):
    """Every command's Click class: see :func:`plain_coercion`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        plain_coercion(self.get_params(ctx))
        return super().parse_args(ctx, args)


class Group(TyperGroup):
    """The root's Click class (its global options): see :func:`plain_coercion`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        plain_coercion(self.get_params(ctx))
        return super().parse_args(ctx, args)
