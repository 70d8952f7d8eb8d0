"""``statewright paths``: the transition cover, every simple path, JSON, and bad files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import EXAMPLES, Cli

MACHINE = """\
name: doc
version: 1
states:
- {name: draft, initial: true}
- {name: review}
- {name: approved, terminal: true}
- {name: rejected, terminal: true}
events:
- {name: submit}
- {name: approve}
- {name: reject}
- {name: edit}
- {name: comment}
transitions:
- {event: submit, source: draft, target: review}
- {event: approve, source: review, target: approved, guard: "payload.ok == True"}
- {event: reject, source: review, target: rejected}
- {event: edit, source: review, target: draft}
- {event: comment, source: review, target: review}
"""


def write(tmp_path: Path, text: str = MACHINE, name: str = "machine.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_paths_prints_a_cover_one_sequence_per_line(cli: Cli, tmp_path: Path) -> None:
    lines = cli("paths", write(tmp_path), db=False).stdout.splitlines()
    assert lines[0] == "draft --submit--> review --approve [payload.ok == True]--> approved"
    text = "\n".join(lines)
    for edge in ("--reject--> rejected", "--edit--> draft", "review --comment--> review"):
        assert edge in text
    assert all(line.startswith("draft ") for line in lines)


def test_paths_all_lists_every_simple_path(cli: Cli, tmp_path: Path) -> None:
    lines = cli("paths", write(tmp_path), "--all", db=False).stdout.splitlines()
    assert lines == [
        "draft --submit--> review --approve [payload.ok == True]--> approved",
        "draft --submit--> review --reject--> rejected",
    ]
    assert cli("paths", write(tmp_path), "--all", "--max-length", "1", db=False).stdout == ""


def test_paths_json(cli: Cli, tmp_path: Path) -> None:
    cover = cli.json("paths", write(tmp_path))
    assert cover["machine"] == "doc" and cover["unreachable"] == []
    first = cover["sequences"][0]
    assert first[1] == {
        "source": "review",
        "event": "approve",
        "target": "approved",
        "guard": "payload.ok == True",
    }
    every = cli.json("paths", write(tmp_path), "--all")
    assert [[s["event"] for s in p] for p in every["paths"]] == [
        ["submit", "approve"],
        ["submit", "reject"],
    ]


def test_paths_of_a_registered_type(cli: Cli) -> None:
    out = cli("paths", "agent_task", db=False).stdout
    assert out.startswith("planned --start--> running")
    app = str(EXAMPLES / "refund_approval.py")
    out = cli("paths", "refund_approval", "--app", app, db=False).stdout
    assert "awaiting_approval --approval_reminder--> awaiting_approval" in out


def test_paths_reports_bad_files_and_unknown_types(cli: Cli, tmp_path: Path) -> None:
    missing = cli.error("paths", str(tmp_path / "nope.yaml"), code=2)
    assert missing.startswith("error[invalid_input]") and "nope.yaml" in missing
    broken = write(tmp_path, MACHINE.replace("target: rejected", "target: nowhere"), "bad.yaml")
    invalid = cli.error("paths", broken, code=1)
    assert invalid.startswith("error[") and "nowhere" in invalid
    garbage = cli.error("paths", write(tmp_path, "{: [", "x.yaml"), code=1)
    assert garbage.startswith("error[definition_invalid]") and "not valid YAML" in garbage
    unknown = cli.error("paths", "no_such_type", code=2)
    assert "neither a definition file" in unknown


def test_the_testing_helpers_and_the_pytest_plugin_import_nothing_heavy() -> None:
    # The plugin loads in every pytest session of every project that installs statewright.
    code = (
        "import sys, statewright.testing.pytest_plugin, statewright.testing.paths; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'hypothesis') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
