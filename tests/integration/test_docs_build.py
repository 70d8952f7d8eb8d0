"""The documentation site builds in strict mode: a broken link or anchor, a page missing from
the nav, a mkdocstrings reference that does not resolve is a warning, and any warning fails
the build (``strict: true`` and ``validation:`` in mkdocs.yml). As CI runs it: ``.ci/run``
runs the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_site_builds_strict_without_warnings(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (site / "index.html").is_file()
    assert (site / "tutorial" / "index.html").is_file()
    assert (site / "search" / "search_index.json").is_file()
