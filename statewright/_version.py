"""The package's version, in a module of its own so that the package's modules can read it
without importing the package root (``statewright/__init__.py`` re-exports it)."""

from __future__ import annotations

__version__ = "0.1.0"
