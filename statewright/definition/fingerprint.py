"""A machine definition's fingerprint, and whether one definition only adds to another.

A stored workflow names its machine by ``(name, version)``. If the definition behind a version
changes while workflows are on it, their rows and logs stop meaning what they meant: a state
renamed makes them unreadable, an edge removed strands them. So the store keeps each registered
version's fingerprint (a SHA-256 of the canonical document, :func:`fingerprint`) and the engine
refuses to open when a version's definition changed (:class:`DefinitionChanged`), unless the
change only *adds* (:func:`only_additions`) and the caller allows that explicitly.

Python guards and actions are part of the document by name only: editing a guard function's
body is not seen (its name is what the definition promises).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from statewright.definition.machine import Machine

__all__ = ["canonical_document", "fingerprint", "only_additions"]


def canonical_document(machine: Machine) -> dict[str, Any]:
    """The machine as the plain document that its fingerprint hashes (descriptions included:
    they are what agents are told)."""
    from statewright.definition.formats.document import to_dict

    return to_dict(machine)


def fingerprint(machine: Machine) -> str:
    """``sha256:<hex>`` of the canonical JSON of the machine's document (sorted keys)."""
    return fingerprint_of(canonical_document(machine))


def fingerprint_of(document: Mapping[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def only_additions(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What ``new`` changes of ``old`` beyond adding (empty: it only adds states, events, and
    edges for a (source, event) pair ``old`` had none for). Each entry names the state or
    event, for the error."""
    problems: list[str] = []
    if old.get("name") != new.get("name") or old.get("version") != new.get("version"):
        problems.append("the name or version differs")
    for kind in ("states", "events"):
        before = _named(old, kind)
        after = _named(new, kind)
        for name, item in before.items():
            if name not in after:
                problems.append(f"{kind[:-1]} {name!r} was removed or renamed")
            elif after[name] != item:
                problems.append(f"{kind[:-1]} {name!r} was changed")
    for (source, event), edges in _edges(old).items():
        now = _edges(new).get((source, event), [])
        if now != edges:
            problems.append(f"the transitions on {event!r} from {source!r} were changed")
    return problems


def _named(document: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The document's states (by path: nested ones flattened, each marked compound or not,
    so a child added to a compound state is an addition, while a leaf that became compound
    is a change) or events, by name."""
    if kind == "events":
        return {item["name"]: item for item in document.get("events", [])}
    out: dict[str, Any] = {}

    def walk(states: list[Mapping[str, Any]], prefix: str) -> None:
        for item in states:
            path = prefix + item["name"]
            children = item.get("states") or []
            out[path] = {**{k: v for k, v in item.items() if k != "states"}, "$": bool(children)}
            walk(children, path + ".")

    walk(document.get("states", []), "")
    return out


def _edges(document: Mapping[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per (source, event), its edges in priority order (a multi-source edge once per
    source)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in document.get("transitions", []):
        sources = [t["source"]] if isinstance(t["source"], str) else list(t["source"])
        edge = {k: v for k, v in t.items() if k != "source"}
        for s in sources:
            out.setdefault((s, t["event"]), []).append(edge)
    return out
