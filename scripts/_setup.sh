# Shared by scripts/demo and scripts/test: create .venv and install the package into it.
# Needs only Python 3.11+ on PATH (override with PYTHON=...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "statewright needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
}
# Python bytecode is written (next to the sources, as Python does by default) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE): the test suite starts hundreds of Python
# processes, and each would compile the package and its dependencies from source again.
export PYTHONDONTWRITEBYTECODE=
# The virtualenv is made without pip, and uv is installed into it by the given Python's own pip
# when it has one, else by the pip wheel that Python ships for ensurepip, run from the wheel
# itself: installing pip into the virtualenv first cost 8 of the 12 s it took to get uv. Where
# that wheel is missing or fails, pip is installed the usual way (ensurepip) and used.
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv --without-pip .venv
fi
# The dependencies are installed with uv: it resolves, downloads and unpacks in parallel, 3 s
# here against pip's 22 s for the test dependencies. Where uv cannot be had or fails, pip does
# it all. Nothing is compiled here: Python compiles what it imports, and scripts/test compiles
# what the suite imports before it starts (scripts/_warm_pycache.py).
quiet=(--quiet --disable-pip-version-check --no-compile)
with_pip() {
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
  .venv/bin/python -m pip install "${quiet[@]}" "$@"
}
get_uv() {
  [ -x .venv/bin/uv ] && return 0
  # The pip of the Python we were given, when it has one, installs uv into .venv: its modules
  # are compiled already, where pip run from its wheel compiles them again (4 s here, not 6).
  "$PYTHON" -m pip --python .venv/bin/python install "${quiet[@]}" uv >/dev/null 2>&1 &&
    [ -x .venv/bin/uv ] && return 0
  local wheel
  wheel=$(.venv/bin/python -c 'import ensurepip, pathlib
print(next(pathlib.Path(ensurepip.__file__).parent.glob("_bundled/pip-*.whl")))' 2>/dev/null) &&
    .venv/bin/python "$wheel/pip" install "${quiet[@]}" uv >/dev/null 2>&1 && return 0
  with_pip uv >/dev/null 2>&1
}
uv_install() {
  get_uv &&
    VIRTUAL_ENV="$PWD/.venv" .venv/bin/uv pip install --quiet --python .venv/bin/python \
      -e ".${EXTRAS:-}"
}
if ! uv_install; then
  echo "installing with uv failed: installing with pip (slower)" >&2
  with_pip --upgrade pip
  with_pip -e ".${EXTRAS:-}"
fi
