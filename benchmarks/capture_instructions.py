"""Instructions per stack capture, counted by valgrind's callgrind (independent of load).

Prints, for the interpreter running it (which must have memtape installed and valgrind
on PATH):
- ``capture_traceback()`` called from C at Python depth 32 (or each of ``--depths``; the
  framework path), with the event recorder on: the difference between two call counts
  over the extra calls;
- the deep_recursion workload (width 200) untraced and under ``memtape.tracemalloc`` at
  nframe 1 and 25: the workload's instructions (a run with `--repeats` repeats less one
  with none, so that start-up and imports drop out) and the ratio over untraced.

Usage: python benchmarks/capture_instructions.py [--low N] [--high N] [--repeats N]
       [--depths 1,8,32] [--capture-only]
       (a few minutes: every row runs a fresh interpreter under callgrind)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CAPTURE = """
import sys
sys.path.insert(0, {tests!r})
import memtape
from c_abi.build import load
module = load({lib!r})
def at_depth(depth, fn):
    return fn() if depth <= 1 else at_depth(depth - 1, fn)
memtape.record_memory_events(True, 1000, sources=("framework",))
at_depth({depth}, lambda: module.time_capture({calls}))
memtape.record_memory_events(False)
"""

DEEP = """
import sys
sys.path.insert(0, {workloads!r})
import deep_recursion
nframe = {nframe}
if nframe:
    import memtape.tracemalloc as tm
    tm.start(nframe)
deep_recursion.main(repeats={repeats}, width=200)
if nframe:
    tm.stop()
"""


def instructions(code: str, out_file: str = "/dev/null") -> int:
    """Instructions callgrind counts for `code` run by this interpreter (all threads);
    callgrind's profile goes to `out_file`."""
    return _callgrind(code, out_file, [])


def program_thread_instructions(code: str, keep: str | None = None) -> tuple[int, int]:
    """Instructions of `code` run by this interpreter: all threads, and the program's own
    (the first thread; memtape's flusher and resolver are threads of their own) less a
    capture's stop. The stop encodes what the flusher had not taken yet: little in a real
    run (a few ms of journal), but under valgrind, which runs one thread at a time, the
    flusher falls behind and the stop encodes much of the run. With `keep`, callgrind's
    profiles are left at `keep-01` (the program's thread), `keep-02` and so on."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep if keep is not None else os.path.join(tmp, "callgrind.out")
        total = _callgrind(code, out, ["--separate-threads=yes"])
        first = f"{out}-01"
        found = re.search(r"^(?:summary|totals): (\d+)", Path(first).read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no total in callgrind's file of the first thread ({first})")
        inclusive = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", first],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        stop = re.search(
            r"^\s*([\d,]+) \([^)]*\)\s+\S*:_native::session::capture_session::stop\b",
            inclusive,
            re.MULTILINE,
        )
        stopping = int(stop.group(1).replace(",", "")) if stop else 0
        return total, int(found.group(1)) - stopping


def _callgrind(code: str, out_file: str, options: list[str]) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out_file}",
            *options,
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise RuntimeError(out)
    return int(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--low", type=int, default=20_000)
    p.add_argument("--high", type=int, default=120_000)
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--depths", default="32", help="comma-separated Python depths")
    p.add_argument("--capture-only", action="store_true", help="skip deep_recursion")
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from c_abi.build import build_fakecache

    print(f"python {sys.version.split()[0]}")
    tests = str(REPO / "tests")
    with tempfile.TemporaryDirectory() as tmp:
        lib = str(build_fakecache(Path(tmp)))
        for depth in (int(d) for d in args.depths.split(",")):
            low, high = (
                instructions(CAPTURE.format(tests=tests, lib=lib, depth=depth, calls=calls))
                for calls in (args.low, args.high)
            )
            per = (high - low) / (args.high - args.low)
            print(f"capture_traceback() from C at depth {depth}: {per:,.0f} instructions per call")
    if args.capture_only:
        return 0
    workloads = str(REPO / "benchmarks" / "workloads")
    base = 0
    for nframe in (0, 1, 25):
        n = instructions(
            DEEP.format(workloads=workloads, nframe=nframe, repeats=args.repeats)
        ) - instructions(DEEP.format(workloads=workloads, nframe=nframe, repeats=0))
        base = base or n
        label = "untraced" if nframe == 0 else f"memtape.tracemalloc nframe {nframe}"
        print(
            f"deep_recursion (repeats={args.repeats}, width=200) {label:<32} "
            f"{n / 1e6:9.1f} M  {n / base:5.2f}x"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
