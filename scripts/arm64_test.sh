#!/usr/bin/env bash
# memtape on 64-bit ARM Linux, built and tested on this x86-64 machine (as root): the
# arm64 part of the test command (`MEMTAPE_ARM64=1 scripts/test.sh`), which also runs
# alone. In the roots of scripts/arm64_root.sh (made once, ~8 min):
#   1. cross-builds, in the x86-64 cross root: `cargo build --release --workspace --target
#      aarch64-unknown-linux-gnu`, and the wheel for arm64 CPython 3.14 (`maturin build
#      --target aarch64-unknown-linux-gnu`, against the arm64 root's sysconfigdata)
#   2. in the arm64 root, under qemu: installs the wheel and pytest into .venv-arm64-3.14,
#      then runs CPython's own test_tracemalloc against memtape and, to score it, against
#      the stdlib's tracer in the same harness; the native-allocation tests (their C
#      libraries built by the arm64 root's gcc); the fork and thread tests of the
#      tracemalloc drop-in; and a user's session: `memtape run` of a real program, then
#      `memtape stats`, `top` and `report` on its capture
# Tests that cannot run under qemu-user are deselected here only (ARM64_LEFT_OUT, each
# with its reason, printed in the summary). Every step runs even if an earlier one
# failed; the exit status is 1 if any failed. Each step's time is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
root_script=scripts/arm64_root.sh
venv=.venv-arm64-3.14
wheels=target/arm64/wheels
passed=0
failed=0
failures=()

# The pytest files run under qemu.
ARM64_TESTS=(
  tests/test_native_alloc.py
  tests/test_native_reports.py
  tests/test_native_signals.py
  tests/test_native_sinks.py
  tests/test_native_stacks.py
  tests/test_tm_fork.py
  tests/test_tm_threads.py
)
# Tests deselected under qemu only, and why (the node id, then the reason).
churn="20 rounds of 100,000 lists through the RAW hooks and libc's allocator take about \
160 s emulated, past the test's 60 s limit (the malloc case passed here with the limit \
raised to 900 s)"
ARM64_LEFT_OUT=(
  "tests/test_native_signals.py::test_signal_handlers_allocate_under_memtape_run[native-stacks] \
its Python SIGALRM handler, fired every 0.5 ms, takes 0.36 ms (median; 0.46-0.75 ms at the \
90th percentile) emulated under memtape run --native, against 2-15 us natively, so CPython \
runs it nested in itself until RecursionError (as it does natively, without memtape, to any \
handler slower than its timer); neither qemu's signal delivery nor a lock is at fault: with \
a 5 ms timer the same test passes here in 25 s"
  "tests/test_native_alloc.py::test_python_heap_churn_is_never_a_native_free[malloc] $churn"
  "tests/test_native_alloc.py::test_python_heap_churn_is_never_a_native_free[pymalloc_debug] $churn"
  "tests/test_native_alloc.py::test_python_heap_churn_is_never_a_native_free[malloc_debug] $churn"
  "tests/test_native_reports.py::test_no_allocator_of_its_own_in_an_ordinary_run the process's \
RSS holds qemu-user's own memory (its translated code and tables, about 14 MiB of anonymous \
memory no allocator call made), which the test's 2 MiB bound on what memtape did not see \
cannot allow"
)

step() {
  local name="$1" start=$SECONDS
  shift
  echo
  echo "=== arm64: $name"
  if "$@"; then
    passed=$((passed + 1))
    echo "=== arm64: $name: passed in $((SECONDS - start)) s"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "=== arm64: FAILED: $name (after $((SECONDS - start)) s)"
  fi
}

roots() {
  bash "$root_script" ensure
}

cross_build() {
  # The tools the cross build needs beside Debian's: maturin, in a venv of the cross
  # root's own Python (kept with the roots).
  bash "$root_script" cross bash -c '
    set -e
    tools="$HOME/.cache/memtape/arm64-tools"
    [ -x "$tools/bin/maturin" ] || {
      python3 -m venv "$tools" && "$tools/bin/pip" install -q "maturin>=1.8,<2"
    }
    cargo build --release --workspace --target aarch64-unknown-linux-gnu
    rm -rf target/arm64/wheels
    "$tools/bin/maturin" build --release --target aarch64-unknown-linux-gnu \
      --interpreter python3.14 --compatibility linux --out target/arm64/wheels
  '
}

arm64_venv() {
  local wheel
  wheel=$(ls "$wheels"/memtape-*-cp314-*linux_aarch64.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || {
    echo "no arm64 wheel in $wheels" >&2
    return 1
  }
  bash "$root_script" run bash -c '
    set -e
    [ -x "$0/bin/python" ] || python3.14 -m venv "$0"
    "$0/bin/python" -m pip install -q --disable-pip-version-check "pytest>=8" numpy
    "$0/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$1"
    "$0/bin/python" -c "import platform, memtape._native as n; print(platform.machine(), n.__file__)"
  ' "$venv" "$wheel"
}

cpython_suite() {
  # cpython_suite BACKEND: CPython's Lib/test/test_tracemalloc.py under memtape ("memtape")
  # or the stdlib's own tracer ("proxy"), in the same harness.
  bash "$root_script" run "$venv/bin/python" tests/cpython/run_cpython_tracemalloc.py \
    --python "$venv/bin/python" --backend "$1"
}

pytest_suite() {
  local deselect=() t
  for t in "${ARM64_LEFT_OUT[@]}"; do deselect+=(--deselect "${t%% *}"); done
  bash "$root_script" run "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "${deselect[@]}" "${ARM64_TESTS[@]}"
}

user_session() {
  # What a new user does: record a real program, then read the capture back.
  bash "$root_script" run bash -c '
    set -ex
    out=$(mktemp -d)
    trap "rm -rf $out" EXIT
    memtape="$0/bin/memtape"
    "$memtape" run --native -o "$out/run.memtape" examples/report_builder.py >/dev/null
    "$memtape" stats "$out/run.memtape"
    "$memtape" top "$out/run.memtape" | tee "$out/top.txt"
    grep -q index_records "$out/top.txt"
    "$memtape" report "$out/run.memtape" -o "$out/report.html"
    test -s "$out/report.html"
  ' "$venv"
}

start=$SECONDS
step "roots (scripts/arm64_root.sh ensure)" roots
step "cross build: cargo build --workspace and the CPython 3.14 wheel" cross_build
step "arm64 venv with the wheel" arm64_venv
step "CPython 3.14 test_tracemalloc on memtape" cpython_suite memtape
step "CPython 3.14 test_tracemalloc on the stdlib's tracer (the score)" cpython_suite proxy
step "pytest: native allocations, fork, threads" pytest_suite
step "memtape run, stats, top, report" user_session

echo
if [ "${#ARM64_LEFT_OUT[@]}" -gt 0 ]; then
  printf 'arm64: left out under qemu:\n'
  printf '  %s\n' "${ARM64_LEFT_OUT[@]}"
fi
if [ "$failed" -gt 0 ]; then
  printf 'arm64: failed steps:\n'
  printf '  %s\n' "${failures[@]}"
fi
echo "arm64: $passed passed, $failed failed, in $((SECONDS - start)) s"
[ "$failed" -eq 0 ]
