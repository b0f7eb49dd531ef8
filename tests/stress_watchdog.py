"""Running a workload under a watchdog that notices a process that stops making progress.

The workload (tests/stress_workload.py) and every process it forks write their progress
counters to ``DIR/hb-<pid>.json`` and dump their Python stacks to ``DIR/stacks-<pid>.txt``
on SIGUSR1. The watchdog reads the counters a few times a second; when a live process has
a counter that has not moved for ``stall_s`` seconds (or the whole run outlives
``limit_s``), it collects the Python stacks (SIGUSR1) and the native stacks (gdb, else
eu-stack, else the kernel's view in /proc) of that process and of its descendants, kills
the whole process group and reports them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from child_python import child_env

POLL_S = 0.25
NATIVE_STACK_TIMEOUT_S = 60.0
MAX_NATIVE_STACKS = 3  # gdb takes a second or two per process


@dataclass
class WatchedRun:
    """How a watched run ended."""

    returncode: int
    stdout: str
    stderr: str
    stall: str | None = None
    processes: int = 0
    stalled_pids: list[int] = field(default_factory=list)

    def describe(self) -> str:
        text = f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        if self.stall:
            text = f"{self.stall}\n{text}"
        return text


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (None: gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def native_stacks(pid: int) -> str:
    """The native stacks of every thread of `pid`."""
    if shutil.which("gdb"):
        cmd = ["gdb", "-p", str(pid), "-batch", "-nx", "-q", "-iex", "set auto-load off",
               "-ex", "set pagination off", "-ex", "thread apply all bt 40"]
    elif shutil.which("eu-stack"):
        cmd = ["eu-stack", "-p", str(pid)]
    else:
        return kernel_stacks(pid)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=NATIVE_STACK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"{cmd[0]} timed out\n" + kernel_stacks(pid)
    text = done.stdout.strip() or done.stderr.strip()
    return f"$ {' '.join(cmd)}\n{text}\n{kernel_stacks(pid)}"


def kernel_stacks(pid: int) -> str:
    """What the kernel says each thread of `pid` waits in (wchan, syscall, stack)."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        parts = [f"thread {task.name}:"]
        for name in ("comm", "wchan", "syscall", "stack"):
            try:
                value = (task / name).read_text(encoding="utf-8").strip()
            except OSError:
                continue
            parts.append(f"{name}={value}")
        lines.append(" ".join(parts))
    return "\n".join(lines)


def python_stacks(directory: Path, pid: int) -> str:
    """Asks `pid` to dump its Python stacks (SIGUSR1) and reads them back."""
    path = directory / f"stacks-{pid}.txt"
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return f"cannot signal {pid}: {exc}"
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            time.sleep(0.2)  # let the dump finish
            return path.read_text(encoding="utf-8", errors="replace")
        time.sleep(0.05)
    return f"no Python stacks from {pid} (it stopped before it registered its dump file)"


class Progress:
    """The watchdog's view of every process' counters."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: dict[int, dict[str, tuple[int, float]]] = {}
        self.finished: set[int] = set()
        self.roles: dict[int, str] = {}

    def poll(self, now: float) -> None:
        for path in self.directory.glob("hb-*.json"):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            pid = int(record["pid"])
            self.roles[pid] = str(record["role"])
            if record["done"]:
                self.finished.add(pid)
            known = self.seen.setdefault(pid, {})
            for key, value in record["counts"].items():
                if key not in known or known[key][0] != value:
                    known[key] = (value, now)

    def stalled(self, now: float, stall_s: float) -> dict[int, list[str]]:
        """Live, unfinished processes with counters that did not move for `stall_s`."""
        out: dict[int, list[str]] = {}
        for pid, counts in self.seen.items():
            if pid in self.finished or process_state(pid) in (None, "Z", "X"):
                continue
            keys = [f"{k} (at {v}, {now - t:.1f}s)" for k, (v, t) in counts.items()
                    if now - t > stall_s]
            if keys:
                out[pid] = keys
        return out


def stall_report(directory: Path, root: int, stalled: Mapping[int, list[str]],
                 progress: Progress, reason: str) -> str:
    pids = list(stalled) or [root]
    for pid in list(pids):
        pids.extend(p for p in descendants(pid)
                    if p not in pids and process_state(p) not in (None, "Z", "X"))
    sections = [f"WATCHDOG: {reason}"]
    for pid, keys in stalled.items():
        sections.append(f"process {pid} ({progress.roles.get(pid, '?')}) stopped making "
                        f"progress: {', '.join(keys)}")
    for n, pid in enumerate(pids):
        role = progress.roles.get(pid, "?")
        sections.append(f"===== process {pid} ({role}): Python stacks\n"
                        f"{python_stacks(directory, pid)}")
        if n < MAX_NATIVE_STACKS:
            native = native_stacks(pid)
        else:
            native = f"(only the first {MAX_NATIVE_STACKS} processes go through gdb)\n"
            native += kernel_stacks(pid)
        sections.append(f"===== process {pid} ({role}): native stacks\n{native}")
    return "\n".join(sections)


def run_watched(
    argv: Sequence[str],
    directory: Path,
    *,
    env: Mapping[str, str] | None = None,
    stall_s: float = 10.0,
    limit_s: float = 300.0,
) -> WatchedRun:
    """Runs ``sys.executable *argv`` (DIR is the workload's progress directory) under the
    watchdog; never hangs."""
    directory.mkdir(parents=True, exist_ok=True)
    out_path, err_path = directory / "stdout.txt", directory / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err,
                                env=child_env(env), start_new_session=True)
    progress = Progress(directory)
    started = time.monotonic()
    report = None
    stalled: dict[int, list[str]] = {}
    while proc.poll() is None:
        time.sleep(POLL_S)
        now = time.monotonic()
        progress.poll(now)
        stalled = progress.stalled(now, stall_s)
        if stalled:
            report = stall_report(directory, proc.pid, stalled, progress,
                                  f"no progress for {stall_s}s")
            break
        if now - started > limit_s:
            report = stall_report(directory, proc.pid, {}, progress,
                                  f"the run outlived its limit of {limit_s}s")
            break
    if report is not None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # forked children left behind
    return WatchedRun(
        returncode=proc.returncode,
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
        stderr=err_path.read_text(encoding="utf-8", errors="replace"),
        stall=report,
        processes=len(progress.seen),
        stalled_pids=sorted(stalled),
    )
