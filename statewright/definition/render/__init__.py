"""Diagrams of a machine: Mermaid and Graphviz DOT text (no rendering, no I/O)."""

from __future__ import annotations

from statewright.definition.render.dot import to_dot
from statewright.definition.render.mermaid import to_mermaid

__all__ = ["to_dot", "to_mermaid"]
