"""Real target processes for the ``memtape attach`` tests, and the scenarios that drive
them. Standard library only: the 3.14/3.15 scenarios run this file as a script inside
the Debian-unstable root (``scripts/sid_root.sh run python3.14 attach_scenario.py ...``),
printing their result as JSON.

The target (``TARGET_SOURCE``) holds objects made before any attach (2,000 ``Before``
instances of 30 slots each, heavy enough to rank among the census' ten largest types
whatever else the interpreter holds at that moment), then serves commands it finds as
numbered files in its command directory: ``alloc`` makes three 100,000-byte ``bytes``
objects on one known line, ``check`` writes what it sees of memtape from inside (its
threads, and the interpreter's PEP 445 allocator functions compared with those it had at
start: memtape's hooks replace them), ``exit`` ends it with status 3. It prints the same
lines whatever memtape does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 60.0

TARGET_SOURCE = """\
import ctypes, json, os, sys, threading, time

class Before:
    __slots__ = tuple(f"field{i}" for i in range(30))  # 2,000 of them: ~0.5 MB

before = [Before() for _ in range(2000)]
kept = [None] * 64
slot = 0

class Allocator(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("ctx", "malloc", "calloc", "realloc", "free")]

get_allocator = ctypes.pythonapi.PyMem_GetAllocator
get_allocator.argtypes = [ctypes.c_int, ctypes.POINTER(Allocator)]
get_allocator.restype = None

def allocators():
    found = []
    for domain in (0, 1, 2):  # PYMEM_DOMAIN_RAW, _MEM, _OBJ
        a = Allocator()
        get_allocator(domain, ctypes.byref(a))
        found.append([a.ctx, a.malloc, a.calloc, a.realloc, a.free])
    return found

at_start = allocators()
commands = sys.argv[1]
open(os.path.join(commands, "ready"), "w").close()
print("started", flush=True)
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
        for _ in range(3):
            kept[slot] = bytes(100_000)  # @alloc
            slot += 1
        print("allocated", flush=True)
    elif command == "hold":  # 5 s in C holding the GIL: no thread runs Python meanwhile
        open(path + ".held", "w").close()
        ctypes.PyDLL(None).sleep(5)
    elif command == "fork":  # a child that allocates and exits through atexit
        child = os.fork()
        if child == 0:
            kept[slot] = bytes(100_000)
            sys.exit(0)
        os.waitpid(child, 0)
    elif command == "check":
        seen = {
            "memtape_imported": "memtape" in sys.modules,
            "threads": sorted(t.name for t in threading.enumerate()),
            "tasks": len(os.listdir("/proc/self/task")),
            "allocators_as_at_start": allocators() == at_start,
            "block_size": sys.getsizeof(bytes(100_000)),
        }
        with open(path + ".json", "w") as f:
            json.dump(seen, f)
    elif command == "exit":
        break
    open(path + ".done", "w").close()
print("bye", flush=True)
sys.exit(3)
"""


def alloc_line() -> int:
    """The line of the target that allocates after the attach."""
    lines = TARGET_SOURCE.splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.endswith("# @alloc"))


class Target:
    """A running target process in ``workdir``."""

    def __init__(
        self,
        python: str,
        workdir: Path,
        env: dict[str, str] | None = None,
        options: tuple[str, ...] = (),
        source: str = TARGET_SOURCE,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.script = workdir / "target.py"
        self.script.write_text(source)
        self.commands = workdir / "commands"
        self.commands.mkdir()
        self.sent = 0
        if env is None:
            # memtape is not importable in the target: the payload brings it.
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(
            [python, *options, str(self.script), str(self.commands)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self._wait_for(self.commands / "ready")

    def _wait_for(self, path: Path) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the target exited: {self.proc.communicate()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the target did not write {path}")
            time.sleep(0.01)

    def _post(self, command: str) -> Path:
        """Writes the next command file whole (the target may look at any moment)."""
        path = self.commands / str(self.sent)
        self.sent += 1
        partial = path.with_suffix(".partial")
        partial.write_text(command)
        partial.rename(path)
        return path

    def send(self, command: str) -> Path:
        path = self._post(command)
        self._wait_for(path.with_name(path.name + ".done"))
        return path

    def hold(self) -> Path:
        """Has the target's main thread sleep 5 s in C holding the GIL (memtape can run
        nothing in it, or in any thread, meanwhile); the path whose ``.done`` says it
        went on."""
        path = self._post("hold")
        self._wait_for(path.with_name(path.name + ".held"))
        return path

    def wait_done(self, command: Path) -> None:
        self._wait_for(command.with_name(command.name + ".done"))

    def check(self) -> dict[str, Any]:
        path = self.send("check")
        return json.loads(path.with_name(path.name + ".json").read_text())

    def finish(self) -> dict[str, Any]:
        self._post("exit")
        out, err = self.proc.communicate(timeout=TIMEOUT_S)
        return {"stdout": out, "stderr": err, "returncode": self.proc.returncode}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def run(argv: list[str], timeout: float = TIMEOUT_S) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return {"stdout": done.stdout, "stderr": done.stderr, "returncode": done.returncode}


def read_capture(memtape: list[str], capture: Path) -> dict[str, Any]:
    """What ``top --json`` and ``stats --json`` say of the capture."""
    top = run([*memtape, "top", "--json", "--at", "end", str(capture)])
    stats = run([*memtape, "stats", "--json", str(capture)])
    text = run([*memtape, "stats", str(capture)])
    page = capture.with_suffix(".html")
    run([*memtape, "report", str(capture), "-o", str(page)])
    return {
        "stats_text": text["stdout"],
        "report": page.read_text() if page.exists() else "",
        "top": json.loads(top["stdout"]) if top["returncode"] == 0 else top,
        "stats": json.loads(stats["stdout"]) if stats["returncode"] == 0 else stats,
        "top_stderr": top["stderr"],
    }


def unattached(python: str, workdir: Path) -> dict[str, Any]:
    """The target's run without memtape: alloc, check, exit."""
    target = Target(python, workdir)
    try:
        target.send("alloc")
        check = target.check()
        return {"check": check, "end": target.finish()}
    finally:
        target.kill()


def attach_then_detach(python: str, memtape: list[str], workdir: Path, how: str) -> dict[str, Any]:
    """Attach, allocate, then stop by ``how``: ``detach`` (memtape detach) or
    ``duration`` (--duration); check from inside, exit; read the capture."""
    target = Target(python, workdir / "target")
    capture = workdir / "attached.mtape"
    result: dict[str, Any] = {
        "pid": target.pid,
        "alloc_line": alloc_line(),
        "script": str(target.script),
    }
    try:
        result["before"] = target.check()
        attach = [*memtape, "attach", str(target.pid), "-o", str(capture)]
        if how == "detach":
            result["attach"] = run(attach)
            result["during"] = target.check()
            target.send("alloc")
            result["detach"] = run([*memtape, "detach", str(target.pid)])
        else:
            waiting = subprocess.Popen(
                [*attach, "--duration", "3"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + TIMEOUT_S
            while target.check()["allocators_as_at_start"] and time.monotonic() < deadline:
                time.sleep(0.05)
            result["during"] = target.check()
            target.send("alloc")
            out, err = waiting.communicate(timeout=TIMEOUT_S)
            result["attach"] = {"stdout": out, "stderr": err, "returncode": waiting.returncode}
        result["after"] = target.check()
        result["sessions_left"] = [
            n for n in os.listdir("/tmp") if n.startswith(f"memtape-attach.{target.pid}.")
        ]
        result["end"] = target.finish()
    finally:
        target.kill()
    result["unattached"] = unattached(python, workdir / "unattached")
    result |= read_capture(memtape, capture)
    return result


def remote_debug_disabled(python: str, memtape: list[str], workdir: Path) -> dict[str, Any]:
    """memtape attach to targets that turned PEP 768 off, each way; then each target's
    own check and end."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ways: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
        "environment": (env | {"PYTHON_DISABLE_REMOTE_DEBUG": "1"}, ()),
        "option": (env, ("-X", "disable-remote-debug")),
    }
    results: dict[str, Any] = {}
    for name, (target_env, options) in ways.items():
        target = Target(python, workdir / name, target_env, options)
        try:
            attach = run([*memtape, "attach", str(target.pid), "-o", str(workdir / "x.mtape")])
            results[name] = {"attach": attach, "check": target.check(), "end": target.finish()}
        finally:
            target.kill()
    return results


def no_gdb_version_mismatch(python: str, memtape: list[str], workdir: Path) -> dict[str, Any]:
    """memtape on another minor version than the target's (3.14+), without gdb on PATH."""
    target = Target(python, workdir / "target")
    try:
        env = os.environ | {"PATH": str(workdir)}
        argv = [*memtape, "attach", str(target.pid), "-o", str(workdir / "x.mtape")]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        attach = {"stdout": done.stdout, "stderr": done.stderr, "returncode": done.returncode}
        return {"attach": attach, "check": target.check(), "end": target.finish()}
    finally:
        target.kill()


def free_threaded_by_name(python: str, memtape: list[str], workdir: Path) -> dict[str, Any]:
    """memtape attach to an interpreter whose file says it is a free-threaded build (a
    copy of ``python`` named ``python3.Xt``, as Debian and python.org name those builds;
    none can be installed here): the check reads the name before anything else."""
    import shutil

    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    workdir.mkdir(parents=True, exist_ok=True)
    renamed = workdir / f"python{version}t"
    shutil.copy2(shutil.which(python) or python, renamed)
    target = Target(str(renamed), workdir / "target")
    try:
        attach = run([*memtape, "attach", str(target.pid), "-o", str(workdir / "x.mtape")])
        return {"attach": attach, "check": target.check(), "end": target.finish()}
    finally:
        target.kill()


# A thread-pool server: its main thread waits for the pool (on a lock, in C) and runs no
# Python code, so it reaches no safe point; a worker serves the commands.
POOL_TARGET = """\
import json, os, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

commands = sys.argv[1]
kept = [None] * 16

def serve():
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
                kept[i] = bytes(100_000)  # @alloc
        elif command == "check":
            with open(path + ".json", "w") as f:
                json.dump({"threads": sorted(t.name for t in threading.enumerate())}, f)
        elif command == "size":
            with open(path + ".json", "w") as f:
                f.write(str(sys.getsizeof(bytes(100_000))))
        open(path + ".done", "w").close()
        if command == "exit":
            return

with ThreadPoolExecutor(2, thread_name_prefix="worker") as pool:
    served = pool.submit(serve)
    open(os.path.join(commands, "ready"), "w").close()
    served.result()
print("bye")
"""


def thread_pool_server(python: str, memtape: list[str], workdir: Path) -> dict[str, Any]:
    """Attach to ``POOL_TARGET``, allocate in its worker, detach; what the target and
    the capture show."""
    target = Target(python, workdir / "target", source=POOL_TARGET)
    capture = workdir / "pool.mtape"
    result: dict[str, Any] = {}
    try:
        check = target.send("check")
        result["before"] = json.loads(check.with_name(check.name + ".json").read_text())
        result["attach"] = run([*memtape, "attach", str(target.pid), "-o", str(capture)])
        target.send("alloc")
        result["detach"] = run([*memtape, "detach", str(target.pid)])
        check = target.send("check")
        result["after"] = json.loads(check.with_name(check.name + ".json").read_text())
        size = target.send("size")
        result["block_size"] = int(size.with_name(size.name + ".json").read_text())
        target._post("exit")
        out, err = target.proc.communicate(timeout=TIMEOUT_S)
        result["end"] = {"stdout": out, "stderr": err, "returncode": target.proc.returncode}
    finally:
        target.kill()
    lines = POOL_TARGET.splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.endswith("# @alloc"))
    sites = read_capture(memtape, capture)["top"]["sites"]
    mine = [
        s
        for s in sites
        if (s["frames"][0]["filename"], s["frames"][0]["line"]) == (str(target.script), line)
    ]
    result["at_line"] = [[s["count"], s["bytes"]] for s in mine]
    result["function"] = mine[0]["frames"][0]["function"] if mine else None
    return result


SCENARIOS = {
    "detach": lambda python, memtape, work: attach_then_detach(python, memtape, work, "detach"),
    "duration": lambda python, memtape, work: attach_then_detach(python, memtape, work, "duration"),
    "remote-debug-disabled": remote_debug_disabled,
    "no-gdb": no_gdb_version_mismatch,
    "free-threaded": free_threaded_by_name,
    "pool": thread_pool_server,
}

if __name__ == "__main__":
    # attach_scenario.py PYTHON SCENARIO: memtape runs on the running interpreter, the
    # target on PYTHON; prints what the scenario found as JSON.
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        memtape = [sys.executable, "-m", "memtape"]
        print(json.dumps(SCENARIOS[sys.argv[2]](sys.argv[1], memtape, Path(scratch))))
