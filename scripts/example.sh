#!/usr/bin/env bash
# Builds memtape for the python3 on PATH (into .venv-X.Y) and profiles the bundled example,
# printing its top allocation sites.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(python3 -c 'import sys;print("%d.%d"%sys.version_info[:2])')
py=$(bash scripts/venv.sh "$ver" | tail -1)
exec "$py" -m memtape.tracemalloc --nframe 5 --top 8 examples/report_builder.py "$@"
