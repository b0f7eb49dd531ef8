"""Every way ``memtape attach`` (and ``detach``) refuses: one line naming the reason,
exit status 2, and the target running on as if nothing had happened (checked from
inside it: no memtape thread, module or allocator hook, same output and status)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from attach_scenario import Target
from test_attach import BASE_PYTHON, HOST_PYTHONS, MEMTAPE, REPO, in_sid_root, pyenv_python

PYTHON_310 = pyenv_python("3.10")


def memtape(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    return subprocess.run(
        [*MEMTAPE, *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def assert_refused(done: Any, command: str, reason: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memtape {command}: "), done.stderr
    assert reason in lines[0], lines[0]
    assert done.stdout == ""


def assert_untouched(target: Target, tmp_path: Path) -> None:
    """The target runs on as before: nothing of memtape's in it, same output and status."""
    seen = target.check()
    assert seen["threads"] == ["MainThread"]
    assert seen["allocators_as_at_start"] and not seen["memtape_imported"]
    assert not [n for n in os.listdir("/tmp") if n.startswith(f"memtape-attach.{target.pid}.")]
    target.send("alloc")
    end = target.finish()
    assert end == {"stdout": "started\nallocated\nbye\n", "stderr": "", "returncode": 3}
    assert not list(tmp_path.glob("*.mtape"))


def test_no_such_process(tmp_path: Path) -> None:
    with open("/proc/sys/kernel/pid_max") as f:
        missing = int(f.read()) + 1
    done = memtape("attach", str(missing), "-o", str(tmp_path / "x.mtape"))
    assert_refused(done, "attach", f"no process {missing}")
    assert_refused(memtape("detach", str(missing)), "detach", f"no process {missing}")


def test_not_a_python_process(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        done = memtape("attach", str(sleeper.pid), "-o", str(tmp_path / "x.mtape"))
        assert_refused(done, "attach", f"process {sleeper.pid} is not a CPython process")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_unsupported_version(tmp_path: Path) -> None:
    target = Target(PYTHON_310, tmp_path / "target")
    try:
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "x.mtape"))
        assert_refused(done, "attach", "runs CPython 3.10: memtape attaches to 3.11 to 3.15")
        assert_untouched(target, tmp_path)
    finally:
        target.kill()


# A system interpreter of the running version (nobody cannot enter pyenv's /root), else
# the host's Debian 12 Python, 3.11: memtape must be built for the one used.
_RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"
_SYSTEM_VERSION = _RUNNING if os.path.exists(f"/usr/bin/python{_RUNNING}") else "3.11"


@pytest.mark.needs_builds(_SYSTEM_VERSION)
def test_no_rights_to_trace(tmp_path: Path) -> None:
    """memtape as another user (nobody) than the target's (root), without CAP_SYS_PTRACE."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        system_python = f"/usr/bin/python{_SYSTEM_VERSION}"
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        argv += [system_python, "-m", "memtape", "attach", str(target.pid)]
        env = {"PYTHONPATH": str(REPO / "python"), "PATH": os.environ["PATH"]}
        done = subprocess.run(
            [*argv, "-o", "/tmp/never.mtape"], capture_output=True, text=True, env=env, cwd="/tmp"
        )
        assert_refused(done, "attach", f"no permission to trace process {target.pid} (user 0;")
        assert "CAP_SYS_PTRACE" in done.stderr
        assert_untouched(target, tmp_path)
    finally:
        target.kill()


def test_stopped_target(tmp_path: Path) -> None:
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        os.kill(target.pid, signal.SIGSTOP)
        while open(f"/proc/{target.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.01)
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "x.mtape"))
        assert_refused(done, "attach", f"process {target.pid} is stopped (state T")
        assert f"kill -CONT {target.pid}" in done.stderr
        os.kill(target.pid, signal.SIGCONT)
        assert_untouched(target, tmp_path)
    finally:
        target.kill()


def test_already_recorded_by_attach(tmp_path: Path) -> None:
    target = Target(BASE_PYTHON, tmp_path / "target")
    first = tmp_path / "first.mtape"
    try:
        assert memtape("attach", str(target.pid), "-o", str(first)).returncode == 0
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "second.mtape"))
        assert_refused(done, "attach", f"process {target.pid} is already being recorded")
        assert str(first) in done.stderr and f"memtape detach {target.pid}" in done.stderr
        assert not (tmp_path / "second.mtape").exists()
        assert memtape("detach", str(target.pid)).returncode == 0
        # Once detached, there is nothing to detach.
        again = memtape("detach", str(target.pid))
        assert_refused(again, "detach", f"process {target.pid} is not being recorded")
        assert target.check()["threads"] == ["MainThread"]
    finally:
        target.kill()


def test_already_recorded_by_memtape_run(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    capture = tmp_path / "run.mtape"
    run = subprocess.Popen([*MEMTAPE, "run", "-q", "-o", str(capture), str(program)])
    try:
        while not capture.exists():
            time.sleep(0.05)
        time.sleep(0.5)
        done = memtape("attach", str(run.pid), "-o", str(tmp_path / "x.mtape"))
        assert_refused(done, "attach", f"already being recorded by memtape into {capture}")
        assert run.poll() is None
    finally:
        run.kill()
        run.wait()


@pytest.mark.needs_builds("3.13")
def test_gdb_missing_for_311_to_313(tmp_path: Path) -> None:
    target = Target(HOST_PYTHONS["3.13"], tmp_path / "target")
    try:
        env = os.environ | {"PATH": str(tmp_path)}  # no gdb there
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "x.mtape"), env=env)
        assert_refused(done, "attach", "attaching to CPython 3.13 (process")
        assert "needs gdb, which is not on PATH" in done.stderr
        assert_untouched(target, tmp_path)
    finally:
        target.kill()


# The target's version: another than memtape's own (whose build memtape needs to run).
OTHER_VERSION = "3.11" if sys.version_info[:2] == (3, 12) else "3.12"


@pytest.mark.needs_builds(OTHER_VERSION)
def test_missing_build(tmp_path: Path) -> None:
    """A memtape with no build for the target's version names what is missing."""
    tag = OTHER_VERSION.replace(".", "")
    package = tmp_path / "lone" / "memtape"
    shutil.copytree(
        REPO / "python" / "memtape",
        package,
        ignore=lambda _, names: [n for n in names if n.startswith(f"_native.cpython-{tag}-")],
    )
    target = Target(HOST_PYTHONS[OTHER_VERSION], tmp_path / "target")
    try:
        env = os.environ | {"PYTHONPATH": str(package.parent)}
        env.pop("MEMTAPE_BUILDS", None)
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "x.mtape"), env=env)
        assert_refused(
            done,
            "attach",
            f"no memtape build for CPython {OTHER_VERSION}: no _native.cpython-{tag}-",
        )
        assert str(package) in done.stderr and "MEMTAPE_BUILDS" in done.stderr
        assert_untouched(target, tmp_path)
    finally:
        target.kill()
    # Naming a directory that holds the build is enough.
    target = Target(HOST_PYTHONS[OTHER_VERSION], tmp_path / "second")
    try:
        env["MEMTAPE_BUILDS"] = str(REPO / "python")
        assert (
            memtape("attach", str(target.pid), "-o", str(tmp_path / "y.mtape"), env=env).returncode
            == 0
        )
        assert memtape("detach", str(target.pid)).returncode == 0
    finally:
        target.kill()


def test_payload_never_run_leaves_nothing(tmp_path: Path) -> None:
    """A target that holds the GIL in a C call: no thread can run the payload (a blocked
    thread without the GIL could), attach gives up after --timeout, and the payload,
    when the target gets to it later, does nothing at all."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        held = target.hold()
        started = time.monotonic()
        done = memtape("attach", str(target.pid), "-o", str(tmp_path / "x.mtape"), "--timeout", "1")
        assert time.monotonic() - started < 15
        assert_refused(
            done, "attach", f"process {target.pid} did not run memtape's payload within 1 s"
        )
        target.wait_done(held)  # the queued payload runs now, and finds the attach cancelled
        assert_untouched(target, tmp_path)
    finally:
        target.kill()


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("when", ["while gdb runs", "once the payload is queued"])
def test_target_exits_during_the_attach(tmp_path: Path, when: str) -> None:
    """The target (holding the GIL, so that it never runs the payload) is killed while
    gdb works in it, or after: attach says so at once, leaves nothing behind."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        target.hold()
        attach = subprocess.Popen(
            [
                *MEMTAPE,
                "attach",
                str(target.pid),
                "-o",
                str(tmp_path / "x.mtape"),
                "--timeout",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not _children(attach.pid) and time.monotonic() < deadline:  # gdb starts
            time.sleep(0.001)
        if when == "once the payload is queued":
            while _children(attach.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        target.proc.kill()
        started = time.monotonic()
        out, err = attach.communicate(timeout=30)
        assert time.monotonic() - started < 10
        assert_refused(
            subprocess.CompletedProcess([], attach.returncode, out, err),
            "attach",
            f"process {target.pid} exited during the attach",
        )
        assert not [n for n in os.listdir("/tmp") if n.startswith(f"memtape-attach.{target.pid}.")]
    finally:
        target.kill()


@pytest.mark.needs_builds("3.14")
def test_remote_debugging_disabled_314() -> None:
    """PYTHON_DISABLE_REMOTE_DEBUG and -X disable-remote-debug are the target's refusal."""
    results = in_sid_root("python3.14", "python3.14", "remote-debug-disabled")
    for how, expected in (
        ("environment", "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"),
        ("option", "it runs with -X disable-remote-debug"),
    ):
        result = results[how]
        done = subprocess.CompletedProcess(
            [],
            result["attach"]["returncode"],
            result["attach"]["stdout"],
            result["attach"]["stderr"],
        )
        assert_refused(done, "attach", f"has remote debugging disabled: {expected}")
        assert result["check"]["threads"] == ["MainThread"]
        assert not result["check"]["memtape_imported"]
        assert result["end"] == {"stdout": "started\nbye\n", "stderr": "", "returncode": 3}


@pytest.mark.needs_builds("3.14", "3.15")
def test_other_version_without_gdb_314() -> None:
    """memtape on 3.14, target on 3.15, no gdb: PEP 768 cannot cross versions."""
    result = in_sid_root("python3.14", "python3.15", "no-gdb")
    attach = result["attach"]
    done = subprocess.CompletedProcess([], attach["returncode"], attach["stdout"], attach["stderr"])
    assert_refused(done, "attach", "runs CPython 3.15 and memtape runs on 3.14")
    assert "python3.15 -m memtape attach" in attach["stderr"]
    assert not result["check"]["memtape_imported"]
    assert result["end"]["returncode"] == 3


@pytest.mark.needs_builds("3.14")
def test_free_threaded_build_314() -> None:
    """A free-threaded interpreter (3.14t) is refused before anything is done to it."""
    result = in_sid_root("python3.14", "python3.14", "free-threaded")
    attach = result["attach"]
    done = subprocess.CompletedProcess([], attach["returncode"], attach["stdout"], attach["stderr"])
    assert_refused(done, "attach", "runs a free-threaded CPython 3.14t: memtape records builds")
    assert result["check"]["threads"] == ["MainThread"]
    assert result["check"]["allocators_as_at_start"]
    assert not result["check"]["memtape_imported"]
    assert result["end"] == {"stdout": "started\nbye\n", "stderr": "", "returncode": 3}


def test_attach_again_after_a_cancelled_attach(tmp_path: Path) -> None:
    """A cancelled attach whose payload is still queued does not block the next attach,
    and the target records once, as the second attach asked."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        target.hold()
        x, y = tmp_path / "x.mtape", tmp_path / "y.mtape"
        first = memtape("attach", str(target.pid), "-o", str(x), "--timeout", "1")
        assert_refused(first, "attach", "did not run memtape's payload within 1 s")
        second = memtape("attach", str(target.pid), "-o", str(y), "--timeout", "20")
        assert second.returncode == 0, second.stderr
        seen = target.check()
        assert seen["threads"] == ["MainThread", "memtape-attach"]
        assert memtape("detach", str(target.pid)).returncode == 0
        assert target.check()["threads"] == ["MainThread"]
        assert target.finish()["returncode"] == 3
    finally:
        target.kill()
    assert not x.exists() and y.exists()


def test_capture_file_the_target_cannot_write(tmp_path: Path) -> None:
    """The target opens the capture file: a directory that does not exist is its error,
    reported in one line; memtape's thread leaves and no hook stays (memtape's modules,
    imported by then, do)."""
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        missing = tmp_path / "no" / "such" / "dir" / "x.mtape"
        done = memtape("attach", str(target.pid), "-o", str(missing))
        assert_refused(done, "attach", f"cannot create {missing}: No such file or directory")
        deadline = time.monotonic() + 10
        while target.check()["threads"] != ["MainThread"] and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = target.check()
        assert seen["threads"] == ["MainThread"] and seen["allocators_as_at_start"]
        assert not [n for n in os.listdir("/tmp") if n.startswith(f"memtape-attach.{target.pid}.")]
        # Attaching with a file it can write works.
        good = tmp_path / "good.mtape"
        assert memtape("attach", str(target.pid), "-o", str(good)).returncode == 0
        assert memtape("detach", str(target.pid)).returncode == 0
        assert target.finish()["returncode"] == 3
    finally:
        target.kill()
