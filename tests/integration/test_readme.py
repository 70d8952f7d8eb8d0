"""The README's Python blocks run as pasted (in a scratch directory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_python_examples() -> None:
    assert python_blocks()


def test_readme_python_blocks_run(tmp_path: Path) -> None:
    for i, block in enumerate(python_blocks()):
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
        if "spawn: {type: read_file" in block:
            assert done.stdout.splitlines() == ["summarised [('0', 4), ('1', 7)]"]
        if "InputNotAccepted" in block:  # an input schema refuses a bad start
            assert done.stdout.splitlines() == [
                "number - '42' does not match '^INV-[0-9]+$'",
                "amount - 0 is less than or equal to the minimum of 0",
                "open",
            ]
        if "bulk_readme.db" in block:  # a bulk cancel: dry run, real run, the same again
            assert done.stdout.splitlines() == [
                "5 0 ['ord-0', 'ord-1']",
                "5 0 cancelled",
                "0 5",
            ]
        if "fan_out" in block:
            assert done.stdout.splitlines() == [
                "shipped {'0': 'book', '1': 'lamp', '2': 'mug'}",
                "['o-1.0', 'o-1.1', 'o-1.2']",
            ]
        if "invoice.sent" in block:
            assert done.stdout.splitlines()[:2] == [
                "[('failures:inv-2:2', 'failed')]",
                "mailer:inv-1:2:0 {'body': {'to': 'ada@example.com'}, 'topic': 'invoice.sent'}",
            ]
        if "flight_unavailable" in block:
            assert done.stdout.splitlines() == [
                "undone",
                "{'compensated': ['charge', 'reserve']}",
                "['reserve trip-1:reserve', 'charge trip-1:charge', "
                "'refund ch_1 as trip-1:undo.charge', 'release room 12']",
            ]
        if "run_agent" in block and "pydantic_ai" in block:  # a PydanticAI agent in a state
            assert done.stdout.splitlines() == [
                "awaiting_approval ['$start', 'request_approval']",
                "agent.v1.model.0",
                "agent.v1.tool.0-0.lookup_order",
                "agent.v1.model.1",
                "agent.v1.model.2",
            ]
        if "undeliverable" in block:  # the order: a transactional step, compensation, a webhook
            assert done.stdout.splitlines() == [
                "o-1 shipped",
                "o-2 failed",
                "{'$transactions': ['put_back'], 'compensated': ['capture']}",
                "4",
                "['capture o-1:capture', 'capture o-2:capture', 'refund ch-o-2']",
                "[('o-2', 'shipping', 'failed')]",
            ]
        if '"decision"' in block:  # waits that free the worker
            assert done.stdout.splitlines() == [
                "waiting None 60.0",
                "3600.0",
                "approved {'by': 'ada'} 1",
            ]
        if "take_stock" in block:
            assert done.stdout.splitlines() == [
                "o-1 reserved",
                "o-2 failed",
                "[(1,)] [('o-1', 'mug', 2)]",
            ]
        if "statewright_failures_total" in block:
            assert done.stdout.splitlines()[:2] == [
                "$start None None None None",
                "charged payload.amount > 100 charge 2 5000.0",
            ]
            assert len(done.stdout.splitlines()) == 4, done.stdout
        if "run_agent" in block and "openai_agents" in block:  # an Agents SDK agent in a state
            assert done.stdout.splitlines() == [
                "awaiting_approval",
                "agent.v1.model.0 120",
                "agent.v1.tool.call_0.read_order {'order': 'o-1', 'total': 40}",
                "agent.v1.model.1 120",
            ]
        if "hello-ada" in block:
            assert done.stdout.splitlines()[0] == "awaiting_approval"
            assert "approval_granted awaiting_approval -> sent by grace" in done.stdout
        if "check_budgets" in block:  # a per-visit budget ends a ghost loop
            assert done.stdout.splitlines() == [
                "waiting_human 3000",
                "{'input_tokens': 2700, 'output_tokens': 300, 'tokens': 3000, 'cost': 0.03, "
                "'model_calls': 3}",
            ]


def test_readme_definition_files_check(tmp_path: Path) -> None:
    """A YAML block that is a type's definition file (``states:`` at the top) passes
    ``statewright check``, as a user would save and check it."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.DOTALL)
    definitions = [b for b in blocks if re.search(r"^states:", b, flags=re.M)]
    assert definitions
    for i, block in enumerate(definitions):
        path = tmp_path / f"definition{i}.yaml"
        path.write_text(block)
        done = subprocess.run(
            [sys.executable, "-m", "statewright.cli", "check", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
