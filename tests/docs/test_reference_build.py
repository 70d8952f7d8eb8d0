"""The reference pages build with MkDocs in strict mode, with no warning (mkdocstrings and
griffe included), and link checking (``tests/docs/mkdocs_reference.yml``: the pages of
``docs/reference/`` alone, with the same handler options as the site's ``mkdocs.yml``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_the_reference_pages_build_strictly_without_a_warning(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(HERE / "mkdocs_reference.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    python = (tmp_path / "site" / "python" / "index.html").read_text(encoding="utf-8")
    # the engine's operations (part/blocking descriptors) are shown as methods
    for anchor in (
        "statewright.engine.core.Engine.send",
        "statewright.engine.core.Engine.start",
        "statewright.engine.core.Engine.get",
        "statewright.engine.core.Engine.list_workflows",
        "statewright.engine.steps.Run.step",
        "statewright.sync.SyncEngine.send",
        "statewright.engine.workflow_type.WorkflowType",
        "statewright.definition.machine.Machine",
    ):
        assert f'id="{anchor}"' in python, anchor
