"""Keys a workflow type keeps out of sight: the one place redaction is decided and done.

A type declares ``redact`` (``WorkflowType(..., redact=("stripe_secret_ref",
"customer.card.number"))``): top-level context keys or dotted paths into nested objects. A
:class:`Redactor` built for one workflow then

- **removes** those keys (the key and its value, not a marker) from every JSON value it is
  given: the context, step results, event payloads and context patches of the log, progress
  reports. A path crosses lists element by element (``items.secret`` drops ``secret`` from
  every object of the list ``items``); a key that itself holds dots (``"customer.card"``) is
  matched too.
- **masks** the text of the values it removed wherever else it shows up (an error message
  that quotes the card number, a payload string that echoes it) with :data:`MASK`. Those
  values are learnt from the workflow's context and from whatever else is read with it
  (:meth:`Redactor.learn`); scalars shorter than :data:`MIN_SECRET` characters are not
  masked (masking ``"1"`` would garble every text and hide nothing).

Who gets redacted views is :class:`~statewright.access.Access`'s call: agents over MCP and
summaries always; over HTTP every caller but operators and admins.

Every walk here is iterative: a stored value may be nested deeper than Python recurses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "[redacted]"
"""What a redacted value's text is replaced with inside other strings."""
MIN_SECRET = 4
"""Values whose text is shorter than this are removed but not masked elsewhere."""

KeyPath = tuple[str, ...]


def path_problem(path: Any) -> str | None:
    """Why ``path`` is not a usable redact entry, or None."""
    if not isinstance(path, str) or not path:
        return f"redact entries must be non-empty strings, not {path!r}"
    if any(not part for part in path.split(".")):
        return f"redact path {path!r} has an empty segment"
    return None


def parse_paths(paths: Iterable[str]) -> tuple[KeyPath, ...]:
    return tuple(tuple(p.split(".")) for p in paths)


class Redactor:
    """Redacts the values of one workflow (see the module docstring).

    Args:
        paths: the type's ``redact`` entries (dotted strings).
        sources: JSON values to learn secret texts from (the context first).
    """

    def __init__(self, paths: Sequence[str] = (), *sources: Any) -> None:
        self.paths = parse_paths(paths)
        self._secrets: set[str] = set()
        self._ordered: list[str] | None = []
        self.learn(*sources)

    @property
    def active(self) -> bool:
        return bool(self.paths)

    def learn(self, *sources: Any) -> None:
        """Remember the texts of the values ``sources`` hold at the redacted paths."""
        if not self.paths:
            return
        for source in sources:
            if not isinstance(source, dict | list):
                continue
            for path in self.paths:
                for found in _at(source, path):
                    for leaf in _leaves(found):
                        if len(leaf) >= MIN_SECRET and leaf not in self._secrets:
                            self._secrets.add(leaf)
                            self._ordered = None

    def value(self, value: Any) -> Any:
        """A copy of ``value`` without the redacted keys, secret texts masked."""
        if not self.paths:
            return value
        out = _copy(value, self.text)
        for path in self.paths:
            _drop(out, path)
        return out

    def mapping(self, value: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """:meth:`value` of a JSON object (None stays None)."""
        if value is None:
            return None
        out = self.value(dict(value))
        assert isinstance(out, dict)
        return out

    def text(self, text: str) -> str:
        """``text`` with every secret text replaced by :data:`MASK`."""
        if not self._secrets:
            return text
        if self._ordered is None:
            # Longest first: a secret holding another is masked whole.
            self._ordered = sorted(self._secrets, key=len, reverse=True)
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def opt_text(self, text: str | None) -> str | None:
        return None if text is None else self.text(text)


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (iterative: any depth)."""
    return _copy(value, _same)


def _same(text: str) -> str:
    return text


NO_REDACTION = Redactor()
"""Shows everything (a type without ``redact``, or a caller allowed to see it all)."""


def _at(root: Any, path: KeyPath) -> list[Any]:
    """The values found at ``path`` in ``root`` (lists crossed element by element)."""
    found: list[Any] = []
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        if isinstance(node, list):
            stack.extend((item, i) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        rest = ".".join(path[i:])
        if i + 1 < len(path) and rest in node:
            found.append(node[rest])
        if path[i] in node:
            if i + 1 == len(path):
                found.append(node[path[i]])
            else:
                stack.append((node[path[i]], i + 1))
    return found


def _drop(root: Any, path: KeyPath) -> None:
    """Remove ``path`` from ``root`` in place (lists crossed element by element)."""
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        if isinstance(node, list):
            stack.extend((item, i) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        node.pop(".".join(path[i:]), None)
        if i + 1 < len(path) and path[i] in node:
            stack.append((node[path[i]], i + 1))


def _leaves(value: Any) -> Iterable[str]:
    """The texts of the scalars in ``value`` (numbers as they would be printed)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int | float):
            yield str(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)


def _copy(value: Any, on_text: Any) -> Any:
    """A deep copy of a JSON value with ``on_text`` applied to every string (not keys)."""
    if isinstance(value, str):
        return on_text(value)
    if not isinstance(value, dict | list | tuple):
        return value
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, holder, 0)]
    while stack:
        src, parent, slot = stack.pop()
        out: Any
        if isinstance(src, dict):
            out = {}
            items: Iterable[tuple[Any, Any]] = src.items()
        else:
            out = [None] * len(src)
            items = enumerate(src)
        parent[slot] = out
        for k, v in items:
            if isinstance(v, dict | list | tuple):
                out[k] = None
                stack.append((v, out, k))
            elif isinstance(v, str):
                out[k] = on_text(v)
            else:
                out[k] = v
    return holder[0]
