"""docs/_incoming/dashbulk.md (bulk actions in the dashboard and over MCP): its Python
blocks run as pasted, each in a fresh process in a scratch directory, and print what the page
says they print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "_incoming" / "dashbulk.md"


def test_dashbulk_page_python_blocks_run(tmp_path: Path) -> None:
    text = PAGE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    printed = re.findall(r"```python\n.*?```\n\nprints\n\n```text\n(.*?)```", text, re.DOTALL)
    assert blocks and len(printed) == len(blocks)
    for i, (block, out) in enumerate(zip(blocks, printed, strict=True)):
        script = tmp_path / f"block{i}.py"
        script.write_text(block)
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == out
