"""The registered workflow types, by name and machine version, and their recorded definitions.

New workflows use a type's highest registered version; a workflow keeps the version it started
with, so every version still running must stay registered for its workflows to run (or be
migrated: :func:`statewright.engine.operator.migrate`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from statewright.clock import Clock
from statewright.definition.machine import Machine
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import DefinitionChanged, UnknownWorkflowType
from statewright.store.protocol import Store

log = logging.getLogger("statewright.engine")


class Registry:
    """Workflow types by name and version (a bare :class:`Machine` is a type without
    handlers)."""

    def __init__(self, types: Iterable[WorkflowType | Machine] = ()) -> None:
        self._versions: dict[str, dict[int, WorkflowType]] = {}
        self._latest: dict[str, WorkflowType] = {}
        self.register(*types)

    def register(self, *types: WorkflowType | Machine) -> None:
        """Register workflow types (a bare Machine becomes a type with no handlers).

        Several versions of one machine may be registered: new workflows use the highest,
        existing ones keep the version they started with.
        """
        for t in types:
            wtype = t if isinstance(t, WorkflowType) else WorkflowType(t)
            self._versions.setdefault(wtype.name, {})[wtype.version] = wtype
            latest = self._latest.get(wtype.name)
            if latest is None or wtype.version >= latest.version:
                self._latest[wtype.name] = wtype

    @property
    def types(self) -> list[WorkflowType]:
        """The latest registered version of each type."""
        return list(self._latest.values())

    def type_of(self, name: str, version: int | None = None) -> WorkflowType:
        """A type's latest version, or the one asked; raises UnknownWorkflowType."""
        if version is None:
            if name not in self._latest:
                raise UnknownWorkflowType(name, known=sorted(self._latest))
            return self._latest[name]
        found = self._versions.get(name, {}).get(version)
        if found is None:
            versions = self._versions.get(name)
            known = (
                [f"version {v}" for v in sorted(versions)] if versions else sorted(self._latest)
            )
            raise UnknownWorkflowType(name, version, known)
        return found

    def known_machine(self, name: str, version: int) -> Machine | None:
        """The machine of that version, or None when it is not registered here."""
        found = self._versions.get(name, {}).get(version)
        return None if found is None else found.machine

    def versions(self) -> Mapping[str, Mapping[int, WorkflowType]]:
        """Every registered version of every type."""
        return self._versions

    async def record(self, store: Store, clock: Clock, *, allow_compatible: bool) -> None:
        """Check every registered machine version against the definition the store recorded
        for it (recording it the first time): a version whose definition changed is refused
        with :class:`DefinitionChanged` naming the machine, unless the change only adds and
        ``allow_compatible`` is set (then the new one is recorded)."""
        from statewright.definition.fingerprint import (
            canonical_document,
            fingerprint_of,
            only_additions,
        )

        now = clock.now()
        for versions in self._versions.values():
            for wtype in versions.values():
                machine = wtype.machine
                document = canonical_document(machine)
                mine = fingerprint_of(document)
                recorded, before = await store.record_definition(
                    machine.name, machine.version, mine, document, now
                )
                if recorded == mine:
                    continue
                changes = only_additions(before, document)
                if changes or not allow_compatible:
                    raise DefinitionChanged(
                        machine.name, machine.version, changes or ["it only adds"]
                    )
                await store.record_definition(
                    machine.name, machine.version, mine, document, now, replace=True
                )
                log.warning(
                    "machine definition extended in place",
                    extra={
                        "action": "definition_extended",
                        "machine": machine.name,
                        "version": machine.version,
                    },
                )
