"""Compile the dependencies and the package, and rewrite the tests' asserts, once, on every core,
before the test workers start.

Run by scripts/test. In a fresh clone nothing is compiled yet, and each pytest-xdist worker
would compile what it imports and rewrite the asserts of every test module (pytest caches the
result in ``__pycache__``, keyed by a hash of the source, but the workers start together and
all miss): 20 CPU-seconds per worker, a third of the suite's start, and its first servers
would compile theirs. Done here once, on every core, the workers find it cached.

Not compiled: what the suite does not import, or imports in one test only (:data:`LAZY`: the
installers; mypy's sources next to its compiled modules; the OpenAI SDK, of whose 2,100 modules
the classification tests import a quarter, and graphql, which nothing imports); whoever imports
a module of theirs compiles it, once.

Also done once here: hypothesis's table of the constants in the suite's own modules. Hypothesis
parses every module of the project a test process has imported (statewright, the tests, the
examples) for literals to try, on its first example, and caches the result in
``.hypothesis/constants``; in a fresh clone every worker parsed them all again (1.3 CPU-seconds
each) as its first property test started.

pytest has no public call that only rewrites a file, so this uses its own rewriting functions
(``_pytest.assertion.rewrite``) and writes the file pytest itself would write; if they change
or fail, it gives up quietly and pytest does the work as before (the cache is only ever a
cache: pytest checks every file's hash before it uses it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import py_compile
import site
import sys
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAZY = frozenset(
    {
        *("pip", "setuptools", "pkg_resources", "_distutils_hack", "mypy", "mypyc"),
        *("openai", "graphql", "hypothesis_graphql"),
    }
)


def _rewrite(source_path: str) -> None:
    from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc_fp, get_cache_dir

    fn = Path(source_path)
    pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
    source_hash = importlib.util.source_hash(fn.read_bytes())
    with contextlib.suppress(OSError), pyc.open("rb") as cached:
        if cached.read(16)[8:] == source_hash[:8]:
            return  # pytest's own check: the hash is in bytes 8-16
    source_hash, code = _rewrite_test(fn, None)  # type: ignore[arg-type]  # None: the defaults
    pyc.parent.mkdir(exist_ok=True)
    partial = pyc.with_name(f"{pyc.name}.{os.getpid()}")
    with partial.open("wb") as out:
        _write_pyc_fp(out, source_hash, code)
    os.replace(partial, pyc)  # atomic, as pytest writes it: a worker never reads half a file


def _compile(source_path: str) -> None:
    # The checked-hash pyc pytest uses too: valid in any clone, whatever the files' mtimes.
    py_compile.compile(
        source_path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
    )


def _compile_installed(source_path: str) -> None:
    # As pip and uv compile what they install (the files never change once installed).
    if not Path(importlib.util.cache_from_source(source_path)).exists():
        py_compile.compile(source_path, doraise=True)


def _constants(source_path: str) -> None:
    # Hypothesis's own function, on a module object that only names the file: it reads the
    # source, and writes the cache file the test processes then read (keyed by the source's
    # hash). Internal API: if it changes, the job fails quietly and hypothesis does it as before.
    from hypothesis.internal.constants_ast import constants_from_module

    module = types.ModuleType(Path(source_path).stem)
    module.__file__ = source_path
    constants_from_module(module)


JOBS = {
    "rewrite": _rewrite,
    "compile": _compile,
    "installed": _compile_installed,
    "constants": _constants,
}


def _job(item: tuple[str, str]) -> None:
    kind, path = item
    with contextlib.suppress(Exception):  # a cache: an import redoes whatever failed here
        JOBS[kind](path)


def _installed() -> list[Path]:
    sources: list[Path] = []
    for folder in {Path(f).resolve() for f in site.getsitepackages()}:
        for top in folder.iterdir():
            if top.name in LAZY or top.name.endswith((".dist-info", ".egg-info", "__pycache__")):
                continue
            sources += [top] if top.suffix == ".py" else top.rglob("*.py")
    return sources


def main() -> None:
    if sys.dont_write_bytecode:
        return
    jobs = [("installed", str(p)) for p in _installed()]
    jobs += [
        ("rewrite" if p.name == "conftest.py" or p.name.startswith("test_") else "compile", str(p))
        for folder in ("tests", "statewright")
        for p in (ROOT / folder).rglob("*.py")
    ]
    jobs += [
        ("constants", str(p))
        for folder in ("tests", "statewright", "examples")
        for p in (ROOT / folder).rglob("*.py")
    ]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(_job, jobs, chunksize=32))


if __name__ == "__main__":
    main()
