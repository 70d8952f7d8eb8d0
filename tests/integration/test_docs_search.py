"""The search-attribute docs' Python blocks (``docs/_incoming/search.md``) run as pasted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "_incoming" / "search.md"


def test_search_doc_python_blocks_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks
    for i, block in enumerate(blocks):
        script = tmp_path / f"block{i}.py"
        script.write_text(block)
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        if "search_docs.db" in block:
            assert done.stdout.splitlines() == ["['o1', 'o2']", "['o2']"]


def test_search_doc_definition_file_declares_them(tmp_path: Path) -> None:
    from statewright.cli.loading import file_type
    from statewright.engine import WorkflowType

    [yaml_block] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    path = tmp_path / "order.yaml"
    path.write_text(yaml_block)
    loaded = file_type(path)
    assert isinstance(loaded, WorkflowType)
    assert loaded.search_attributes == ("order_number", "customer_id")
