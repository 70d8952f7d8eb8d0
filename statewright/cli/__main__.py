"""``python -m statewright.cli``: the same as the ``statewright`` command."""

from __future__ import annotations

from statewright.cli.main import main

main()
