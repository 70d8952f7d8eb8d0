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
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The dependencies are installed with uv (itself installed with pip, into .venv only): it
# resolves, downloads and unpacks in parallel, 3 s here against pip's 22 s for the test
# dependencies. Where uv cannot be had or fails, pip does it all. Nothing is compiled here:
# Python compiles what it imports, and scripts/test compiles what the suite imports before
# it starts (scripts/_warm_pycache.py).
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile)
uv_install() {
  { [ -x .venv/bin/uv ] || "${pip[@]}" uv >/dev/null 2>&1; } &&
    VIRTUAL_ENV="$PWD/.venv" .venv/bin/uv pip install --quiet --python .venv/bin/python \
      -e ".${EXTRAS:-}"
}
if ! uv_install; then
  echo "installing with uv failed: installing with pip (slower)" >&2
  "${pip[@]}" --upgrade pip
  "${pip[@]}" -e ".${EXTRAS:-}"
fi
