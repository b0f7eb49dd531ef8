"""``memtape attach PID`` / ``memtape detach PID`` on real target processes: CPython
3.11 to 3.13 here (through gdb), 3.14 (PEP 768) and 3.15 (gdb, from a memtape running
on 3.14) in the Debian-unstable root. Each scenario (``attach_scenario``) attaches to a
running target, has it allocate on a known line, stops the recording (``memtape
detach``, or ``--duration``), checks from inside the target that memtape left nothing
behind, and compares the target's output and exit status with a run never attached."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from attach_scenario import Target, attach_then_detach, read_capture, run, thread_pool_server

REPO = Path(__file__).resolve().parent.parent
MEMTAPE = [sys.executable, "-m", "memtape"]
# The interpreter under the test's virtual environment: no memtape installed in it.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
#: Inside the Debian-unstable root (pytest on 3.14 or 3.15, scripts/sid_root.sh).
IN_SID_ROOT = os.environ.get("MEMTAPE_IN_SID_ROOT") == "1"


def pyenv_python(version: str) -> str:
    """pyenv's CPython ``version`` (its newest patch release): a target with no memtape
    installed. pyenv's interpreters are on the host, and bind-mounted into the root."""
    versions = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(
        versions.glob(f"{version}.*/bin/python{version}"),
        key=lambda p: [int(x) for x in p.parts[-3].split(".")],
    )
    assert found, f"no CPython {version} in {versions} (scripts/test.sh's pyenv interpreters)"
    return str(found[-1])


HOST_PYTHONS = {v: pyenv_python(v) for v in ("3.11", "3.12", "3.13")}


def assert_attached_cleanly(result: dict[str, Any], ended_by: str) -> None:
    """What every attach scenario must show."""
    assert result["attach"]["returncode"] == 0, result["attach"]
    assert "recording process" in result["attach"]["stderr"]
    if ended_by == "detached":
        assert result["detach"]["returncode"] == 0, result["detach"]
        assert "capture complete (detached" in result["detach"]["stderr"]
    else:
        assert "capture complete (the duration has passed" in result["attach"]["stderr"]
    before, during, after = result["before"], result["during"], result["after"]
    # memtape was there: its thread and its allocator hooks ...
    assert "memtape-attach" in during["threads"]
    assert not during["allocators_as_at_start"]
    # ... and left nothing behind.
    assert before["threads"] == after["threads"] == ["MainThread"]
    assert after["tasks"] == before["tasks"]
    assert after["allocators_as_at_start"]
    assert result["sessions_left"] == []
    # The target ran as it does without memtape.
    assert result["end"] == result["unattached"]["end"]
    assert result["end"]["returncode"] == 3
    # Exactly the three blocks allocated after the attach, on their line.
    sites = result["top"]["sites"]
    at_line = [
        s
        for s in sites
        if s["frames"][0]["filename"] == result["script"]
        and s["frames"][0]["line"] == result["alloc_line"]
    ]
    assert len(at_line) == 1, sites
    assert at_line[0]["count"] == 3
    assert at_line[0]["bytes"] == 3 * before["block_size"]
    run = result["stats"]["run"]
    assert run["exit"] == ended_by and not run["cut_short"]
    # The target goes on running: no exit status, and its memory counts from the attach.
    assert run["exit_code"] is None
    duration = next(x for x in result["stats_text"].splitlines() if x.startswith("Duration:"))
    assert duration.endswith(f"(exit: {ended_by})"), duration
    # (Peak RSS counted from the attach, or the RSS at the attach and at the end when the
    # process' peak came before it.)
    assert re.search(r"RSS: .* at the attach\b", result["stats_text"]), result["stats_text"]
    assert "at the start" not in result["stats_text"]
    # Every report says what it cannot see, and what was there.
    attached = result["stats"]["attached"]
    assert "memory allocated before is not attributed" in attached["note"]
    assert "memory allocated before is not attributed" in result["top_stderr"]
    assert "memory allocated before is not attributed" in result["report"]
    assert "memory allocated before is not attributed" in result["stats_text"]
    assert "Alive at the attach:" in result["stats_text"]
    assert "__main__.Before" in result["stats_text"]
    census = {t["type"]: t for t in attached["census"]["types"]}
    assert census["__main__.Before"]["count"] == 2000, census


@pytest.mark.parametrize(
    "version", [pytest.param(v, marks=pytest.mark.needs_builds(v)) for v in sorted(HOST_PYTHONS)]
)
def test_attach_then_detach_through_gdb(version: str, tmp_path: Path) -> None:
    result = attach_then_detach(HOST_PYTHONS[version], MEMTAPE, tmp_path, "detach")
    assert "through gdb" in result["attach"]["stderr"]
    assert_attached_cleanly(result, "detached")


def test_attach_for_a_duration(tmp_path: Path) -> None:
    result = attach_then_detach(BASE_PYTHON, MEMTAPE, tmp_path, "duration")
    assert_attached_cleanly(result, "duration")


def in_sid_root(cli_python: str, target_python: str, scenario: str) -> dict[str, Any]:
    """A scenario of ``attach_scenario`` run inside the Debian-unstable root, memtape on
    ``cli_python``, the target on ``target_python`` (straight away when the test runs in
    that root already)."""
    enter = [] if IN_SID_ROOT else ["bash", str(REPO / "scripts" / "sid_root.sh"), "run"]
    done = subprocess.run(
        [
            *enter,
            "env",
            f"PYTHONPATH={REPO / 'python'}",
            cli_python,
            str(REPO / "tests" / "attach_scenario.py"),
            target_python,
            scenario,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.needs_builds("3.14")
def test_attach_314_through_pep_768() -> None:
    result = in_sid_root("python3.14", "python3.14", "detach")
    assert "through PEP 768" in result["attach"]["stderr"]
    assert_attached_cleanly(result, "detached")


@pytest.mark.needs_builds("3.14", "3.15")
def test_attach_315_from_314_through_gdb() -> None:
    """sys.remote_exec needs the target's version: memtape on 3.14 reaches a 3.15
    target through gdb instead."""
    result = in_sid_root("python3.14", "python3.15", "duration")
    assert "through gdb" in result["attach"]["stderr"]
    assert_attached_cleanly(result, "duration")


def test_target_exits_while_attached(tmp_path: Path) -> None:
    """The target ends first: its capture is complete, ended by the interpreter's exit."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    capture = tmp_path / "exited.mtape"
    try:
        assert run([*MEMTAPE, "attach", str(target.pid), "-o", str(capture)])["returncode"] == 0
        target.send("alloc")
        end = target.finish()
    finally:
        target.kill()
    assert end == {"stdout": "started\nallocated\nbye\n", "stderr": "", "returncode": 3}
    stats = read_capture(MEMTAPE, capture)["stats"]
    assert stats["run"]["exit"] == "interpreter-exit" and not stats["run"]["cut_short"]
    detach = run([*MEMTAPE, "detach", str(target.pid)])
    assert detach["returncode"] == 2 and f"no process {target.pid}" in detach["stderr"]
    assert not [n for n in os.listdir("/tmp") if n.startswith(f"memtape-attach.{target.pid}.")]


def test_forked_child_leaves_the_attach_alone(tmp_path: Path) -> None:
    """A child the target forks while recorded exits through atexit: the parent's
    recording goes on, and detach ends it as usual."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    capture = tmp_path / "forked.mtape"
    try:
        assert run([*MEMTAPE, "attach", str(target.pid), "-o", str(capture)])["returncode"] == 0
        target.send("fork")
        target.send("alloc")
        detach = run([*MEMTAPE, "detach", str(target.pid)])
        assert detach["returncode"] == 0, detach
        assert target.check()["threads"] == ["MainThread"]
        assert target.finish()["returncode"] == 3
    finally:
        target.kill()
    stats = read_capture(MEMTAPE, capture)["stats"]
    assert stats["run"]["exit"] == "detached" and not stats["run"]["cut_short"]


def test_ctrl_c_detaches_before_the_duration(tmp_path: Path) -> None:
    target = Target(BASE_PYTHON, tmp_path / "target")
    capture = tmp_path / "interrupted.mtape"
    try:
        waiting = subprocess.Popen(
            [*MEMTAPE, "attach", str(target.pid), "-o", str(capture), "--duration", "60"],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiting.stderr is not None
        while not waiting.stderr.readline().startswith("memtape attach: recording process"):
            assert waiting.poll() is None
        waiting.send_signal(signal.SIGINT)
        _, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 0, err
        assert "capture complete (detached" in err
        after = target.check()
        assert after["threads"] == ["MainThread"] and after["allocators_as_at_start"]
        assert target.finish()["returncode"] == 3
    finally:
        target.kill()
    assert read_capture(MEMTAPE, capture)["stats"]["run"]["exit"] == "detached"


def assert_pool_recorded(result: dict[str, Any], how: str) -> None:
    attach = result["attach"]
    assert attach["returncode"] == 0, attach
    assert how in attach["stderr"]
    assert result["detach"]["returncode"] == 0, result["detach"]
    assert result["before"]["threads"] == result["after"]["threads"] == ["MainThread", "worker_0"]
    assert result["end"] == {"stdout": "bye\n", "stderr": "", "returncode": 0}
    assert result["at_line"] == [[3, 3 * result["block_size"]]]
    assert result["function"] == "serve"


def test_thread_pool_server_with_a_blocked_main_thread(tmp_path: Path) -> None:
    """Neither a pending call nor PEP 768 reaches a main thread waiting on a lock: gdb
    runs the payload in it where it waits (without the GIL, in a system call), and the
    workers' allocations are recorded exactly."""
    result = thread_pool_server(BASE_PYTHON, MEMTAPE, tmp_path)
    assert_pool_recorded(result, "through gdb, in its main thread blocked in a system call")


@pytest.mark.needs_builds("3.14")
def test_thread_pool_server_314() -> None:
    """The same on 3.14: PEP 768's script waits for the main thread too."""
    result = in_sid_root("python3.14", "python3.14", "pool")
    assert_pool_recorded(result, "through gdb, in its main thread blocked in a system call")


NUMPY_TARGET = """\
import os, sys, time
import numpy as np

commands = sys.argv[1]
kept = [None] * 16
open(os.path.join(commands, "ready"), "w").close()
n = 0
while True:
    path = os.path.join(commands, str(n))
    if not os.path.exists(path):
        time.sleep(0.01)
        continue
    with open(path) as f:
        command = f.read()
    n += 1
    if command == "alloc":
        for i in range(3):
            kept[i] = np.ones(100_000)  # @alloc
        kept[3] = bytes(1000)  # @small
    open(path + ".done", "w").close()
    if command == "exit":
        break
"""


def numpy_capture(tmp_path: Path, *options: str) -> dict[str, Any]:
    """A NumPy program attached to with ``options``, allocating after the attach; what
    ``top --by traceback --json`` says."""
    # The test's own virtual environment has NumPy (and no memtape of this checkout).
    target = Target(sys.executable, tmp_path / "target", source=NUMPY_TARGET)
    capture = tmp_path / "numpy.mtape"
    try:
        attach = run([*MEMTAPE, "attach", str(target.pid), "-o", str(capture), *options])
        assert attach["returncode"] == 0, attach
        target.send("alloc")
        assert run([*MEMTAPE, "detach", str(target.pid)])["returncode"] == 0
        target.send("exit")
        assert target.proc.wait(timeout=30) == 0
    finally:
        target.kill()
    top = run([*MEMTAPE, "top", "--json", "--by", "traceback", "--at", "end", str(capture)])
    data: dict[str, Any] = json.loads(top["stdout"])
    data["script"] = str(target.script)
    return data


def lines_of(tag: str) -> int:
    return next(n for n, t in enumerate(NUMPY_TARGET.splitlines(), 1) if t.endswith(f"# @{tag}"))


def test_attach_options_native_stacks(tmp_path: Path) -> None:
    """--native: NumPy's buffers with the C functions between the line and the
    allocation, counted as the framework's memory."""
    data = numpy_capture(tmp_path, "--native")
    buffers = [s for s in data["sites"] if s["bytes"] >= 3 * 800_000]
    assert len(buffers) == 1 and buffers[0]["count"] == 3
    frames = buffers[0]["frames"]
    assert frames[0]["function"] == "PyDataMem_UserNEW"  # numpy's allocation, in C
    assert (frames[-1]["filename"], frames[-1]["line"]) == (data["script"], lines_of("alloc"))
    assert data["by_source"]["framework"] == buffers[0]["bytes"]


def test_attach_options_min_size_nframe_python_heap_only(tmp_path: Path) -> None:
    data = numpy_capture(tmp_path, "--min-size", "2000", "--nframe", "1", "--no-native-heap")
    assert data["by_source"]["native"] == 0
    assert data["by_source"]["framework"] == 3 * 800_000  # NumPy's buffers still
    assert data["sites"] and all(
        s["bytes"] >= 2000 * s["count"] for s in data["sites"]
    )  # no bytes(1000)
    assert all(len(s["frames"]) == 1 for s in data["sites"])
    assert not [s for s in data["sites"] if s["frames"][0]["line"] == lines_of("small")]


def test_attach_without_census(tmp_path: Path) -> None:
    """--no-census: nothing counted at the attach; the reports still say what they miss."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    capture = tmp_path / "no-census.mtape"
    try:
        attach = run([*MEMTAPE, "attach", str(target.pid), "-o", str(capture), "--no-census"])
        assert attach["returncode"] == 0 and "alive before the attach" not in attach["stderr"]
        assert run([*MEMTAPE, "detach", str(target.pid)])["returncode"] == 0
        target.finish()
    finally:
        target.kill()
    read = read_capture(MEMTAPE, capture)
    assert "census" not in read["stats"]["attached"]
    assert "Alive at the attach" not in read["stats_text"]
    assert "memory allocated before is not attributed" in read["stats_text"]
