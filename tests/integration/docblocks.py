"""The code blocks of the documentation (``docs/*.md``, README.md), found and run as a reader
would paste them: shared by ``test_docs.py`` (the site's pages) and ``test_readme.py``.

How a page says what a block is (an HTML comment on the line before its fence; the site does
not show it):

- ```` ```python ````: run as pasted, each in a fresh interpreter, in a scratch folder the
  blocks of a run share (later blocks may read what earlier ones wrote: use unique database
  names). ``<!-- file: NAME.py -->`` saves it under that name first, so that later blocks
  (and commands) can import it, as the page tells the reader to save it.
- ```` ```bash ````: run with ``bash -e`` in the same folder, the ``statewright`` command on
  ``PATH`` (this interpreter's); it must exit 0.
- ```` ```yaml ````: a type's definition file (``states:`` at the top level) passes
  ``statewright check``; any other (a tokens file, a scrape config) must parse.
- ```` ```json ````: must parse.
- ```` ```text ````: output or a listing, never run. ``<!-- output -->`` before one makes it
  the exact output of the block just above it.
- ``<!-- not run: REASON -->`` before any block: not run, and the reason says why (a server
  that runs until stopped, an install from the internet).

Any other block (another language, no language) fails the test: a block nobody runs must
say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
RUN = ("python", "bash")
CHECKED = ("yaml", "json")
SHOWN = ("text",)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code and the comment before it."""

    page: str
    line: int
    lang: str
    code: str
    marker: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.lang or 'no language'})"

    @property
    def not_run(self) -> str | None:
        """The reason given for not running it, if any."""
        m = re.fullmatch(r"not run:\s*(.*)", self.marker)
        return m.group(1).strip() if m else None

    @property
    def file(self) -> str | None:
        m = re.fullmatch(r"file:\s*(\S+)", self.marker)
        return m.group(1) if m else None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order (fences at the start of a line)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    i = 0
    while i < len(lines):
        fence = re.match(r"```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        before = [line for line in lines[:i] if line.strip()]
        comment = re.fullmatch(r"<!--\s*(.*?)\s*-->", before[-1].strip()) if before else None
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 1, fence.group(1), code, comment.group(1) if comment else ""))
        i = end + 1
    return found


def unhandled(block: Block) -> str | None:
    """Why the test cannot account for this block, or None when it can."""
    if block.not_run is not None:
        return None if block.not_run else "a 'not run:' comment without a reason"
    if block.lang in RUN + CHECKED + SHOWN:
        return None
    return "neither run nor checked: give it a language or say <!-- not run: why -->"


def _env() -> dict[str, str]:
    """The reader's shell: this interpreter's scripts (``statewright``) first on PATH, none of
    the suite's STATEWRIGHT_* settings (a block names its own database and app)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("COLUMNS", "100")
    return env


def run_blocks(found: list[Block], scratch: Path) -> set[int]:
    """Run or check each block in order in ``scratch``, and check its output when the page
    shows it (``<!-- output -->``) or :data:`OUTPUTS` knows it. Returns the indexes of the
    :data:`OUTPUTS` checks that met a block."""
    checked: set[int] = set()
    assert shutil.which("statewright", path=_env()["PATH"]), "no statewright script on PATH"
    last: subprocess.CompletedProcess[str] | None = None
    for n, block in enumerate(found):
        problem = unhandled(block)
        assert problem is None, f"{block.where}: {problem}"
        if block.not_run is not None:
            continue
        if block.lang == "text":
            if block.marker == "output":
                assert last is not None, f"{block.where}: an output with no block above it"
                assert last.stdout.splitlines() == block.code.splitlines(), (
                    f"{block.where}: the block above printed\n{last.stdout}"
                )
            continue
        last = None
        if block.lang == "python":
            script = scratch / (block.file or f"block{n}.py")
            script.write_text(block.code)
            last = _run([sys.executable, script.name], scratch, block)
            for i, (marker, check) in enumerate(OUTPUTS.items()):
                if marker(block.code):
                    check(last.stdout)
                    checked.add(i)
        elif block.lang == "bash":
            last = _run(["bash", "-e", "-c", block.code], scratch, block)
        elif block.lang == "yaml":
            if re.search(r"^states:", block.code, flags=re.M):
                path = scratch / f"definition{n}.yaml"
                path.write_text(block.code)
                _run([sys.executable, "-m", "statewright.cli", "check", path.name], scratch, block)
            else:
                assert isinstance(yaml.safe_load(block.code), dict), block.where
        elif block.lang == "json":
            json.loads(block.code)
    return checked


def _run(args: list[str], cwd: Path, block: Block) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{done.stderr}"
    return done


def _lines(*expected: str) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        assert stdout.splitlines() == list(expected), stdout

    return check


def _first(*expected: str) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        assert stdout.splitlines()[: len(expected)] == list(expected), stdout

    return check


def _records(stdout: str) -> None:
    _first("$start None None None None", "charged payload.amount > 100 charge 2 5000.0")(stdout)
    assert len(stdout.splitlines()) == 4, stdout


def _hello(stdout: str) -> None:
    assert stdout.splitlines()[0] == "awaiting_approval", stdout
    assert "approval_granted awaiting_approval -> sent by grace" in stdout


# What a block prints, for the blocks whose page does not show it: a test of the block's code
# -> a check of its stdout. (Moved here from the README test with the sections they check.)
OUTPUTS: dict[Callable[[str], bool], Callable[[str], None]] = {
    lambda b: "spawn: {type: read_file" in b: _lines("summarised [('0', 4), ('1', 7)]"),
    lambda b: "InputNotAccepted" in b: _lines(  # an input schema refuses a bad start
        "number - '42' does not match '^INV-[0-9]+$'",
        "amount - 0 is less than or equal to the minimum of 0",
        "open",
    ),
    lambda b: "bulk_readme.db" in b: _lines(  # a bulk cancel: dry run, real run, again
        "5 0 ['ord-0', 'ord-1']",
        "5 0 cancelled",
        "0 5",
    ),
    lambda b: "fan_out" in b: _lines(
        "shipped {'0': 'book', '1': 'lamp', '2': 'mug'}",
        "['o-1.0', 'o-1.1', 'o-1.2']",
    ),
    lambda b: "invoice.sent" in b: _first(
        "[('failures:inv-2:2', 'failed')]",
        "mailer:inv-1:2:0 {'body': {'to': 'ada@example.com'}, 'topic': 'invoice.sent'}",
    ),
    lambda b: "flight_unavailable" in b: _lines(
        "undone",
        "{'compensated': ['charge', 'reserve']}",
        "['reserve trip-1:reserve', 'charge trip-1:charge', "
        "'refund ch_1 as trip-1:undo.charge', 'release room 12']",
    ),
    lambda b: "run_agent" in b and "pydantic_ai" in b: _lines(  # a PydanticAI agent
        "awaiting_approval ['$start', 'request_approval']",
        "agent.v1.model.0",
        "agent.v1.tool.0-0.lookup_order",
        "agent.v1.model.1",
        "agent.v1.model.2",
    ),
    lambda b: "undeliverable" in b: _lines(  # the order: a transactional step, compensation
        "o-1 shipped",
        "o-2 failed",
        "{'$transactions': ['put_back'], 'compensated': ['capture']}",
        "4",
        "['capture o-1:capture', 'capture o-2:capture', 'refund ch-o-2']",
        "[('o-2', 'shipping', 'failed')]",
    ),
    lambda b: '"decision"' in b: _lines(  # waits that free the worker
        "waiting None 60.0",
        "3600.0",
        "approved {'by': 'ada'} 1",
    ),
    lambda b: "take_stock" in b: _lines(
        "o-1 reserved",
        "o-2 failed",
        "[(1,)] [('o-1', 'mug', 2)]",
    ),
    lambda b: "statewright_failures_total" in b: _records,
    lambda b: "run_agent" in b and "openai_agents" in b: _lines(  # an Agents SDK agent
        "awaiting_approval",
        "agent.v1.model.0 120",
        "agent.v1.tool.call_0.read_order {'order': 'o-1', 'total': 40}",
        "agent.v1.model.1 120",
    ),
    lambda b: "hello-ada" in b: _hello,
    lambda b: "check_budgets" in b: _lines(  # a per-visit budget ends a ghost loop
        "waiting_human 3000",
        "{'input_tokens': 2700, 'output_tokens': 300, 'tokens': 3000, 'cost': 0.03, "
        "'model_calls': 3}",
    ),
}
