#!/usr/bin/env bash
# Builds memtape's extension into a venv, profile-guided, and installs it there (editable,
# as `maturin develop --release` does). Usage: scripts/pgo_build.sh VENV
#
# Three steps: an instrumented release build counts its branches while
# scripts/pgo_train.py runs every recorder and reader on small inputs (about 20 s);
# llvm-profdata (rustup's llvm-tools component, matched to rustc's LLVM) merges the counts;
# the release build then lays the hooks' hot paths out together (benchmarks/HISTORY.md
# section 55: about 5 % less time traced, the event recorder most). The extension reports
# which kind of build it is (memtape._native.BUILD_KIND: "pgo" or "plain").
#
# Any step that cannot be done (no llvm-tools to be had, a failed training run) falls back
# to the plain release build and says why on stderr; the exit status is the final build's.
# Builds go to $CARGO_TARGET_DIR (default target/) under pgo-gen/ and pgo-use/, the counts to
# pgo-data/X.Y/, so the default target/ keeps serving plain builds.
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${1:?usage: scripts/pgo_build.sh VENV}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
develop() {
  VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --release -q
}
plain() {
  echo "scripts/pgo_build.sh: $1: building without a profile" >&2
  MEMTAPE_BUILD_KIND=plain develop
  exit $?
}
profdata_path() {
  local sysroot host
  sysroot=$(rustc --print sysroot) || return 1
  host=$(rustc -vV | sed -n 's/^host: //p')
  echo "$sysroot/lib/rustlib/$host/bin/llvm-profdata"
}
tool=$(profdata_path) || plain "rustc not found"
if [ ! -x "$tool" ]; then
  rustup component add llvm-tools >/dev/null 2>&1 || true
  tool=$(profdata_path)
  [ -x "$tool" ] || plain "no llvm-profdata (rustup component add llvm-tools did not install it)"
fi
ver=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
  plain "no interpreter in $venv"
data="$target/pgo-data/$ver"
rm -rf "$data"
mkdir -p "$data/raw"
# Builds with one more rustc flag (a profile's path, which may hold a space: it travels in
# CARGO_ENCODED_RUSTFLAGS, see scripts/rustflags_with.sh) into $target/DIR, as build KIND.
# Usage: build_with FLAG KIND DIR
build_with() {
  local encoded
  encoded=$(scripts/rustflags_with.sh "$1") || return 1
  (
    unset RUSTFLAGS
    export CARGO_ENCODED_RUSTFLAGS="$encoded" CARGO_TARGET_DIR="$target/$3"
    MEMTAPE_BUILD_KIND="$2" develop
  )
}
build_with "-Cprofile-generate=$data/raw" instrumented pgo-gen ||
  plain "the instrumented build failed"
"$venv/bin/python" scripts/pgo_train.py || plain "the training run (scripts/pgo_train.py) failed"
"$tool" merge -o "$data/memtape.profdata" "$data/raw" || plain "llvm-profdata merge failed"
build_with "-Cprofile-use=$data/memtape.profdata" pgo pgo-use ||
  plain "the profile-guided build failed"
