#!/usr/bin/env bash
# Runs every memtape test and check, on a fresh machine too (it installs what it needs):
#   Rust: cargo fmt --check, cargo clippy -D warnings, cargo nextest (core and binding),
#     and the capture reader's fuzz target for a bounded time (cargo fuzz on nightly,
#     else the stable stand-in; MEMTAPE_FUZZ_SECONDS, default 60); with
#     MEMTAPE_SLOW_TESTS=1 also memtape-core's slow tests (the slow-tests feature: the
#     reports' memory budget on 20 M events, the capture's size target, a 1 M-event
#     snapshot loaded by Python; about 2 minutes), which the default run leaves out
#   Python: ruff and mypy --strict on python/memtape
#   each CPython's extension built profile-guided (scripts/venv.sh, scripts/pgo_build.sh;
#     MEMTAPE_PGO=0: without a profile); a build without one is listed as left out
#   for each supported CPython (3.11 to 3.15; MEMTAPE_PYTHONS="3.11 3.14" to narrow):
#     memtape's pytest suite (its viewer tests need ../shared/memviz, Chromium, node and
#     npm; the native tests gcc; the stress watchdog gdb; the live view tests tmux; all
#     installed here when missing;
#     the threads-and-fork stress run lasts MEMTAPE_STRESS_SECONDS, default 60), and
#     CPython's own Lib/test/test_tracemalloc.py run
#     against memtape (tests/cpython/run_cpython_tracemalloc.py)
#   3.11-3.13 come from pyenv (or python3.X on PATH); 3.14 and 3.15 from Debian unstable,
#   in a chroot that scripts/sid_root.sh makes once (as root, ~1.5 min, kept in
#   ~/.cache/memtape/sid-root) and mounts around each step, unmounting on every exit;
#   for those two, clippy also runs against their headers.
#   with MEMTAPE_ARM64=1 also 64-bit ARM Linux (scripts/arm64_test.sh, as root): the
#     workspace and a CPython 3.14 wheel cross-built for aarch64, then under qemu in an
#     arm64 root CPython's test_tracemalloc, the native-allocation, fork and thread tests
#     and `memtape run` with its reports; left out by default (emulation is slow)
# Every step runs even if an earlier one failed; the exit status is 1 if any failed. The
# summary at the end names what was left out on purpose, and why.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYO3_PYTHON="${PYO3_PYTHON:-python3}"
versions="${MEMTAPE_PYTHONS:-3.11 3.12 3.13 3.14 3.15}"
passed=0
failed=0
failures=()
# What the run leaves out on purpose, one line each, for the summary.
left_out=()

step() {
  local name="$1"
  shift
  echo
  echo "=== $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "=== FAILED: $name"
  fi
}

rust_tests() {
  # The binding crate's unit tests link libpython; find it through the interpreter.
  local libdir
  libdir=$("$PYO3_PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  if command -v cargo-nextest >/dev/null 2>&1; then
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cargo nextest run --workspace
  else
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cargo test --workspace
  fi
}

fuzz_reader() {
  local seconds="${MEMTAPE_FUZZ_SECONDS:-60}"
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
      cargo install --quiet --locked cargo-fuzz || return 1
    fi
    (cd fuzz && cargo +nightly fuzz run capture_reader -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1)
  else
    echo "no nightly toolchain for cargo fuzz: running the stable stand-in for ${seconds}s"
    MEMTAPE_FUZZ_SECS="$seconds" cargo test --release -p memtape-core --features slow-tests bounded_fuzz
  fi
}

# memtape-core's slow tests that MEMTAPE_SLOW_TESTS=1 runs (the stand-in fuzzer, also
# behind the feature, is the fuzz step's).
SLOW_RUST_TESTS=(
  capture::tests::size::capture_size_and_speed
  report::perf_tests::twenty_million_events
  report::perf_tests::twenty_million_events_random_frees
  report::perf_tests::twenty_million_events_from_a_file
  torch_snapshot::tests::python_tests::one_million_events
)

slow_rust_tests() {
  # One process per test (the budgets read the process's peak RSS): nextest's way, or
  # one cargo test run each.
  local t filter="" status=0
  if command -v cargo-nextest >/dev/null 2>&1; then
    for t in "${SLOW_RUST_TESTS[@]}"; do filter+="${filter:+ | }test(=$t)"; done
    cargo nextest run --release -p memtape-core --features slow-tests -E "$filter" --no-capture
    return
  fi
  for t in "${SLOW_RUST_TESTS[@]}"; do
    cargo test --release -p memtape-core --features slow-tests --lib -- --exact "$t" --nocapture ||
      status=1
  done
  return "$status"
}

# CPython's own test_tracemalloc against memtape; the tests it excludes on purpose (with
# their reasons) go to the summary.
cpython_suite() {
  local v="$1" py="$2" log rc
  log=$(mktemp)
  in_home_of "$v" "$py" tests/cpython/run_cpython_tracemalloc.py --python "$py" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  while IFS= read -r line; do
    left_out+=("CPython $v test_tracemalloc, excluded ${line#  excluded }")
  done < <(grep '^  excluded ' "$log")
  rm -f "$log"
  return "$rc"
}

ensure_tool() {
  # ensure_tool COMMAND "PACKAGES" CONSEQUENCE: installs Debian's PACKAGES when COMMAND is missing.
  local cmd="$1" pkg="$2" consequence="$3"
  command -v "$cmd" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkg >/dev/null
  else
    echo "$cmd is missing: install it (apt-get install $pkg); $consequence" >&2
  fi
}



python_lints() {
  local py="$1"
  "$py" -m pip install -q ruff mypy >/dev/null &&
    "$py" -m ruff check python tests benchmarks &&
    "$py" -m ruff format --check python &&
    "$py" -m mypy
}
# Where the lints run: under the first version's interpreter, wherever it lives.
python_lints_of() {
  local v="$1" py="$2"
  case "$v" in
  3.1[1-3]) python_lints "$py" ;;
  *) bash scripts/sid_root.sh run bash -c "$(declare -f python_lints); python_lints $py" ;;
  esac
}

step "cargo fmt" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
step "rust tests" rust_tests
step "capture reader fuzzing" fuzz_reader
if [ "${MEMTAPE_SLOW_TESTS:-0}" = 1 ]; then
  step "slow Rust tests (MEMTAPE_SLOW_TESTS=1)" slow_rust_tests
else
  left_out+=("memtape-core's slow tests (reports' memory budget on 20 M events, capture size, \
1 M-event snapshot in Python; about 2 minutes): MEMTAPE_SLOW_TESTS=1 runs them")
fi
# The HTML report and flame graph are checked in headless Chromium (Debian's).
ensure_tool chromium chromium "the HTML tests will fail"
# PyTorch's memory viewer runs in headless Chromium through node (tests/memviz_harness.py,
# which npm-installs d3 and playwright-core into ~/.cache/memtape/memviz_npm once).
ensure_tool node nodejs "the viewer tests will fail"
ensure_tool npm npm "the viewer tests will fail"
# The native-allocation tests build a small C library with gcc and load it with ctypes.
ensure_tool gcc "gcc libc6-dev" "the native tests will fail"
# The stress suite's watchdog prints the native stacks of a stuck process with gdb.
ensure_tool gdb gdb "the stress watchdog test will fail"
# The live view is driven in a detached tmux session (tests/test_live_view.py).
ensure_tool tmux tmux "the live view tests will fail"

# Runs "$@" where CPython $v lives: here, or in the Debian-unstable chroot (3.14, 3.15).
in_home_of() {
  local v="$1"
  shift
  case "$v" in
  3.1[1-3]) "$@" ;;
  *) bash scripts/sid_root.sh run "$@" ;;
  esac
}

# Every version is built before any is tested: the attach tests run memtape on one
# version against targets of the others, each needing its own build.
declare -A venv_python=()
for v in $versions; do
  case "$v" in
  3.1[1-3]) ;;
  *)
    if ! bash scripts/sid_root.sh ensure; then
      step "get CPython $v (scripts/sid_root.sh)" false
      continue
    fi
    step "cargo clippy for CPython $v" in_home_of "$v" \
      env PYO3_PYTHON="python$v" cargo clippy -p memtape-python --all-targets -- -D warnings
    ;;
  esac
  if ! py=$(in_home_of "$v" bash scripts/venv.sh "$v" | tail -1) ||
    ! in_home_of "$v" test -x "$py"; then
    step "build memtape for CPython $v" false
    continue
  fi
  venv_python[$v]="$py"
  # The build is profile-guided unless scripts/pgo_build.sh could not make it so.
  kind=$(in_home_of "$v" "$py" -c 'import memtape._native as n; print(n.BUILD_KIND)' || echo unknown)
  [ "$kind" = pgo ] || left_out+=("CPython $v: memtape's profile-guided build \
(built $kind; scripts/pgo_build.sh said why above)")
done
first=1
for v in $versions; do
  [ -n "${venv_python[$v]:-}" ] || continue
  py="${venv_python[$v]}"
  if [ "$first" = 1 ]; then
    step "python lints" python_lints_of "$v" "$py"
    first=0
  fi
  step "pytest on CPython $v" in_home_of "$v" "$py" -m pytest -q tests
  step "CPython $v test_tracemalloc on memtape" cpython_suite "$v" "$py"
done
# 64-bit ARM: its tests left out under qemu go to the summary.
arm64_suite() {
  local log rc
  log=$(mktemp)
  bash scripts/arm64_test.sh 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  while IFS= read -r line; do
    left_out+=("arm64 under qemu: ${line#  }")
  done < <(sed -n '/^arm64: left out under qemu:/,/^arm64: [^l]/p' "$log" | grep '^  ')
  rm -f "$log"
  return "$rc"
}
if [ "${MEMTAPE_ARM64:-0}" = 1 ]; then
  step "64-bit ARM Linux: cross build, tests under qemu (MEMTAPE_ARM64=1)" arm64_suite
else
  left_out+=("64-bit ARM Linux (cross build; CPython 3.14's test_tracemalloc, the native, \
fork and thread tests and memtape run under qemu; 74 min from scratch, about 20 min warm): \
MEMTAPE_ARM64=1 runs it")
fi
for v in 3.11 3.12 3.13 3.14 3.15; do
  case " $versions " in
  *" $v "*) ;;
  *) left_out+=("CPython $v: not in MEMTAPE_PYTHONS") ;;
  esac
done

echo
if [ "${#left_out[@]}" -gt 0 ]; then
  printf 'left out on purpose:\n'
  printf '  %s\n' "${left_out[@]}"
fi
if [ "$failed" -gt 0 ]; then
  printf 'failed steps:\n'
  printf '  %s\n' "${failures[@]}"
fi
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
