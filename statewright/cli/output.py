"""Formatting for the CLI: Rich for people, JSON for programs, and the error report.

Exit codes: 0 success; 2 the input was refused (malformed JSON or argument, a payload that
breaks the event's schema, an event not allowed in the current state, a finished workflow, an
idempotency key used for another request) and nothing was written; 1 any other failure (not
found, conflict, store error, a failed check, an outcome the store could not tell).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from statewright import jsonvalue
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InputNotAccepted,
    InvalidInput,
    InvalidPayload,
    OutcomeUnknown,
    StatewrightError,
    StepDone,
    StepsWouldRerun,
    StepUnresolved,
    WorkflowBusy,
    WorkflowFinished,
    WorkflowPruned,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# Rich is imported when something is first printed, not when a command module is imported:
# `statewright --help` never loads it (see tests/integration/test_cli_start.py).


class _LazyConsole:
    """A :class:`rich.console.Console` made on first use, with these options."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


out = cast("Console", _LazyConsole(highlight=False, soft_wrap=True))  # whole lines: greppable
err = cast("Console", _LazyConsole(stderr=True, highlight=False, soft_wrap=True))


def escape(text: str) -> str:
    """:func:`rich.markup.escape`: ``text`` printed as is, never read as markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


REFUSED = (
    InvalidInput,
    InvalidPayload,
    IllegalTransition,
    WorkflowFinished,
    IdempotencyKeyReused,
    StepDone,
    StepUnresolved,
    WorkflowBusy,
    StepsWouldRerun,
    WorkflowPruned,
)
"""Errors that mean "bad input, nothing changed": exit code 2."""
RETRY_ADVICE = (
    "run the same command again with the same --idempotency-key (if it was applied, nothing "
    "is done twice); without a key, check with `statewright show` before running it again"
)


def exit_code(exc: BaseException) -> int:
    return 2 if isinstance(exc, REFUSED) else 1


def fail(exc: BaseException, *, as_json: bool) -> int:
    """Report ``exc`` on stderr and return the exit code.

    A :class:`StatewrightError` is one line ``error[<code>]: <message>``; anything else is
    reported as ``internal_error``. The ``__cause__``/``__context__`` chain follows, one
    ``caused by`` line each. With ``as_json`` the report is the error's ``to_dict()``.
    """
    if isinstance(exc, StatewrightError):
        data = exc.to_dict()
        if isinstance(exc, OutcomeUnknown):
            # Exit code 1 like any store error, but the one after which something may have
            # changed: say what to do.
            data["message"] = f"{' '.join(exc.message.split()).rstrip('.')}: {RETRY_ADVICE}"
    else:
        data = {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}
    causes = list(_causes(exc))
    if as_json:
        if causes:
            data["causes"] = causes
        sys.stderr.write(json.dumps(data, default=str) + "\n")
    else:
        err.print(f"error[{data['code']}]: {data['message']}", markup=False)
        if isinstance(exc, InputNotAccepted):  # every error of the input, one a line
            for e in exc.errors:
                err.print(f"  at {e['path'] or '(input)'}: {e['message']}", markup=False)
        for cause in causes:
            err.print(f"  caused by: {cause}", style="dim", markup=False)
    return exit_code(exc)


def _causes(exc: BaseException) -> Iterable[str]:
    seen = {id(exc)}
    cur = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield f"{type(cur).__name__}: {cur}"
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)


def parse_json_object(text: str | None, what: str) -> dict[str, Any]:
    """Strictly parse a JSON object from the command line: no NaN, no duplicate keys."""
    if text is None:
        return {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                raise ValueError(f"duplicate key {key!r}")
            obj[key] = value
        return obj

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except ValueError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def plain(value: Any, depth: int = 0) -> Any:
    """Dataclasses (rows, records) to JSON-ready dicts. Only the outer levels are walked:
    deeper down are stored JSON values (no dataclasses), of any depth."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in fields}
    if depth > 4:
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    return value


def _dumps(value: Any, **options: Any) -> str:
    """``json.dumps``, or for a stored value too deep for it, the depth-proof compact form."""
    try:
        return json.dumps(value, default=str, **options)
    except RecursionError:
        return jsonvalue.dumps(value, ensure_ascii=False)


def emit_json(data: Any) -> None:
    sys.stdout.write(_dumps(plain(data), indent=2) + "\n")


def when(ts: float | None) -> str:
    """Local time; the date only when it is not today."""
    if ts is None:
        return "-"
    at = datetime.datetime.fromtimestamp(ts)
    today = at.date() == datetime.date.today()
    return at.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S")


def duration(seconds: float) -> str:
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def compact(value: Any, limit: int = 80) -> str:
    text = _dumps(plain(value), separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(escape(str(v)) for v in r))
    return t


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


class _Formatter(logging.Formatter):
    """``LEVEL logger: message key=value ...`` with the structured ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        from statewright.observability.logs import STANDARD_ATTRS

        message = record.getMessage()
        extras = " ".join(
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in STANDARD_ATTRS and not (k == "action" and v == message)
        )
        text = f"{record.levelname} {record.name}: {message}"
        text += f" {extras}" if extras else ""
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class LogFormat(enum.StrEnum):
    text = "text"
    json = "json"


LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar="STATEWRIGHT_LOG_FORMAT",
        show_envvar=True,
        help="Log lines on stderr: text (LEVEL logger: message key=value) or json (one object "
        "per line: ts, level, logger, message and the structured fields).",
    ),
]
_active: list[logging.Handler] = []


def use_log_format(fmt: LogFormat | str) -> None:
    """Switch the handlers :func:`logs_to_stderr` installed to ``fmt`` (text or json)."""
    from statewright.observability.logs import JsonFormatter

    formatter: logging.Formatter = (
        JsonFormatter() if LogFormat(fmt) is LogFormat.json else _Formatter()
    )
    for handler in _active:
        handler.setFormatter(formatter)


@contextlib.contextmanager
def logs_to_stderr(level: str) -> Iterator[None]:
    """Send statewright's logs to stderr at ``level`` while the block runs.

    The previous level is restored afterwards, so running commands in-process (tests) leaves
    logging as it was.
    """
    logger = logging.getLogger("statewright")
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    previous = logger.level
    logger.addHandler(handler)
    _active.append(handler)
    logger.setLevel(level.upper())
    try:
        yield
    finally:
        _active.remove(handler)
        logger.removeHandler(handler)
        logger.setLevel(previous)
