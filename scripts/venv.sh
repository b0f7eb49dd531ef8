#!/usr/bin/env bash
# Creates (or refreshes) .venv-X.Y for one CPython version and installs memtape into it
# in release mode, profile-guided (MEMTAPE_PGO=0: without a profile).
# Usage: scripts/venv.sh [X.Y]   (default: the python3 on PATH)
# Prints the path of the venv's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
ver="${1:-$(python3 -c 'import sys;print("%d.%d"%sys.version_info[:2])')}"
py=""
if command -v pyenv >/dev/null 2>&1; then
  full=$(pyenv versions --bare 2>/dev/null | grep -E "^${ver//./\\.}\.[0-9]+$" | sort -V | tail -1 || true)
  [ -n "$full" ] && py="$(pyenv root)/versions/$full/bin/python"
fi
if [ -z "$py" ] && command -v "python$ver" >/dev/null 2>&1; then py=$(command -v "python$ver"); fi
if [ -z "$py" ]; then echo "scripts/venv.sh: no CPython $ver found (pyenv or python$ver on PATH)" >&2; exit 3; fi
venv=".venv-$ver"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
fi
# Build and test dependencies (a no-op when already satisfied); pytest-memray for the
# plugin tests that run memtape beside it.
"$venv/bin/python" -m pip install -q "maturin>=1.8,<2" "pytest>=8" pytest-xdist pytest-memray numpy \
  ipython ipykernel nbclient nbformat "mlx[cpu]==0.32.4" "mypy==2.4.1" >/dev/null
# maturin develop builds the extension for this interpreter and installs the package
# editable: profile-guided (scripts/pgo_build.sh, about 1.5 minutes more; it falls back to
# the plain build when it cannot be done), or plain with MEMTAPE_PGO=0.
if [ "${MEMTAPE_PGO:-1}" = 0 ]; then
  VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --release -q >&2
else
  bash scripts/pgo_build.sh "$venv" >&2
fi
echo "$PWD/$venv/bin/python"
