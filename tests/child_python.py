"""Running Python scenarios in a child interpreter, with a hard timeout.

Scenarios that can deadlock (threads, fork) or that need a fresh interpreter run in a
child process started with the interpreter running the tests (``sys.executable``). On a
timeout the child's whole process group is killed (grandchildren from ``os.fork()``
included) and the test fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

DEFAULT_TIMEOUT_S = 60.0

# Environment variables that would start a tracer in the child behind the test's back.
_TRACER_ENV = ("PYTHONTRACEMALLOC", "MEMTAPE_TRACEMALLOC")

# Prepended to every scenario script. The scenario gets `tm`, the module under test
# (its import name is argv[1]; the scenario's own arguments follow), `line_of(tag)` for
# lines of the script marked `# @tm:<tag>`, and `wait_child(pid, timeout)`.
SCENARIO_PRELUDE = '''\
import importlib, os, signal, sys, time, traceback
tm = importlib.import_module(sys.argv[1])
ARGS = sys.argv[2:]

def line_of(tag):
    mark = "# @tm:" + tag
    with open(__file__, encoding="utf-8") as source:
        hits = [n for n, text in enumerate(source, 1) if text.rstrip().endswith(mark)]
    assert len(hits) == 1, (tag, hits)
    return hits[0]

def wait_child(pid, timeout):
    """Exit code of a forked child; kills it and exits 3 if it outlives timeout."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("forked child %d still running after %ss: deadlock?" % (pid, timeout),
                  file=sys.stderr, flush=True)
            os._exit(3)
        time.sleep(0.01)
'''


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without tracer switches, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _TRACER_ENV}
    env.update(extra or {})
    return env


def run_python(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run ``sys.executable *argv``; fail the test (never hang) past ``timeout``."""
    cmd = [sys.executable, *argv]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} ran past {timeout}s (deadlock?)\n--- stdout\n{out}\n--- stderr\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_scenario(
    tmp_path: Path,
    module_name: str,
    body: str,
    *args: str,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Write ``SCENARIO_PRELUDE + body`` to a script and run it against ``module_name``."""
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO_PRELUDE + textwrap.dedent(body), encoding="utf-8")
    return run_python([str(script), module_name, *args], timeout=timeout)


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """A failure message showing what a child printed."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
