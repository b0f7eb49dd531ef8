"""How the payload gets into the target: one line of Python (``bootstrap.payload_code``)
that the target's main thread runs at its next safe point, with the GIL, where a
signal handler would run.

- PEP 768 (3.14+, when memtape runs on the target's own minor version):
  ``sys.remote_exec(pid, script)``; the target runs the script at its next safe point.
- Otherwise through gdb, in batch mode, with no debug symbols read: gdb attaches (the
  target stops), calls ``mmap`` for one page, writes the line into it and calls
  ``Py_AddPendingCall(PyRun_SimpleString, line)``, then detaches: the target is
  stopped for those three calls only (a fraction of a second), and the line runs later
  on the target's main thread, at a safe point, as PEP 768's script does. Calling
  Python from inside the stopped thread (``PyGILState_Ensure`` + ``PyRun_SimpleString``)
  would run it wherever that thread was stopped, inside the allocator or the middle of
  an object's update; a pending call is CPython's own way to run code from outside at a
  safe point. The addresses come from the ELF symbol tables of the files mapped in the
  target (``elf_symbols``), so gdb needs no symbols and loads none. The page (4 KiB)
  stays mapped: the line must outlive gdb, and nothing in the target knows to free it.
- A main thread that runs no Python code (blocked in ``Event.wait()``, ``join()``, a
  long ``sleep``: a thread-pool server's main thread) reaches no safe point, for PEP 768
  or a pending call. Then (:func:`gdb_in_blocked_thread`) gdb runs the line in that
  thread directly, with ``PyGILState_Ensure`` / ``PyRun_SimpleString`` /
  ``PyGILState_Release``, but only where that is safe: the thread is stopped inside a
  blocking system call (futex, sleep, poll, select, read ...: not inside the allocator
  or the interpreter's work) and does not hold the GIL (``PyGILState_Check``), which it
  takes like any thread returning from a blocking call and gives back before it goes on
  waiting. The payload runs once whichever way reaches it first (``session_files``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from memtape.attach.elf_symbols import file_mappings, symbol_addresses
from memtape.attach.target_process import REMOTE_EXEC_FROM, AttachError, TargetProcess

#: The most gdb may take (attach, three calls, detach) before it is stopped.
GDB_TIMEOUT_S = 30.0
PAGE = 4096
PROT_READ_WRITE = 0x3
MAP_PRIVATE_ANONYMOUS = 0x22


def route_for(target: TargetProcess) -> str:
    """``remote_exec`` or ``gdb``: how to reach this target from this interpreter, or a
    AttachError when neither can."""
    if target.version >= REMOTE_EXEC_FROM and sys.version_info[:2] == target.version:
        return "remote_exec"
    if shutil.which("gdb") is not None:
        return "gdb"
    if target.version >= REMOTE_EXEC_FROM:
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise AttachError(
            f"process {target.pid} runs CPython {target.version_text} and memtape runs on "
            f"{here}: PEP 768's sys.remote_exec needs the same version (run "
            f"python{target.version_text} -m memtape attach {target.pid}), or install gdb"
        )
    raise AttachError(
        f"attaching to CPython {target.version_text} (process {target.pid}) needs gdb, "
        "which is not on PATH (Debian: apt-get install gdb)"
    )


def remote_exec(target: TargetProcess, script: str) -> None:
    """Has the target run ``script`` (PEP 768)."""
    try:
        sys.remote_exec(target.pid, script)  # type: ignore[attr-defined]
    except PermissionError as exc:
        raise AttachError(f"no permission to attach to process {target.pid}: {exc}") from None
    except (OSError, RuntimeError, ValueError) as exc:
        raise AttachError(f"could not reach process {target.pid} (PEP 768): {exc}") from None


def _libc(pid: int) -> str:
    for m in file_mappings(pid):
        name = os.path.basename(m.path)
        if name.startswith("libc.so") or (name.startswith("libc-") and name.endswith(".so")):
            return m.path
    raise AttachError(f"process {pid} has no C library mapped (a static executable?)")


def _gdb_string(text: str) -> str:
    if not text.isprintable() or not text.isascii():
        raise AttachError(
            "the payload holds characters gdb cannot write (a path that is not ASCII)"
        )
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gdb_commands(target: TargetProcess, code: str) -> list[str]:
    """gdb's commands, in order, to queue ``code`` as a pending call in the target."""
    python = symbol_addresses(
        target.pid, target.python_file, {"Py_AddPendingCall", "PyRun_SimpleString"}
    )
    libc = symbol_addresses(target.pid, _libc(target.pid), {"mmap"})
    if len(python) != 2 or "mmap" not in libc:
        raise AttachError(
            f"process {target.pid}: could not find Py_AddPendingCall, PyRun_SimpleString and mmap"
        )
    size = len(code.encode("ascii")) + 1
    if size > PAGE:
        raise AttachError("the payload does not fit one page (paths too long)")
    mmap = f"((void *(*)(void *, unsigned long, int, int, int, long)) {libc['mmap']:#x})"
    add = f"((int (*)(void *, void *)) {python['Py_AddPendingCall']:#x})"
    return [
        "set confirm off",
        "set pagination off",
        f"set $page = {mmap}(0, {PAGE}, {PROT_READ_WRITE}, {MAP_PRIVATE_ANONYMOUS}, -1, 0)",
        f"set {{char[{size}]}} $page = {_gdb_string(code)}",
        # Queued only when the page holds the line (a failed mmap gives -1, and the write
        # before then failed too): a ternary evaluates one branch.
        f"print (int) ($page == (void *) -1 ? -1 : "
        f"{add}((void *) {python['PyRun_SimpleString']:#x}, $page))",
        "detach",
        "quit",
    ]


#: x86-64 system calls a thread blocks in while it waits with the GIL released (the
#: number gdb shows in ``$orig_rax`` while the thread is stopped in one).
BLOCKING_SYSCALLS = {
    "read": 0, "poll": 7, "select": 23, "pause": 34, "nanosleep": 35, "accept": 43,
    "recvfrom": 45, "recvmsg": 47, "wait4": 61, "rt_sigtimedwait": 128,
    "rt_sigsuspend": 130, "futex": 202, "clock_nanosleep": 230, "epoll_wait": 232,
    "waitid": 247, "pselect6": 270, "ppoll": 271, "epoll_pwait": 281, "accept4": 288,
    "epoll_pwait2": 441,
}  # fmt: skip


def _run_gdb(target: TargetProcess, commands: list[str]) -> subprocess.CompletedProcess[str]:
    """gdb in batch mode, attached to the target, running ``commands`` as a script (its
    ``if`` blocks need one); no symbols read."""
    gdb_path = shutil.which("gdb")
    if gdb_path is None:
        raise AttachError("gdb is not on PATH")
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", encoding="ascii") as script:
        script.write("\n".join(commands) + "\n")
        script.flush()
        argv = [gdb_path, "-batch", "-nx", "-q", "-iex", "set debuginfod enabled off"]
        argv += ["-iex", "set auto-load off", "-iex", "set auto-solib-add off"]
        argv += ["-p", str(target.pid), "-x", script.name]
        try:
            return subprocess.run(
                argv,
                check=False,
                capture_output=True,
                text=True,
                timeout=GDB_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise AttachError(f"gdb did not finish within {GDB_TIMEOUT_S:.0f} s") from None


def gdb_in_blocked_thread(target: TargetProcess, code: str) -> bool:
    """Runs ``code`` in the target's main thread, stopped in a blocking system call
    without the GIL (see the module's documentation); False, having done nothing, when
    it is not in such a call (or this is not x86-64)."""
    if os.uname().machine != "x86_64":
        return False
    python = symbol_addresses(
        target.pid,
        target.python_file,
        {"PyGILState_Check", "PyGILState_Ensure", "PyGILState_Release", "PyRun_SimpleString"},
    )
    libc = symbol_addresses(target.pid, _libc(target.pid), {"mmap", "munmap"})
    if len(python) != 4 or len(libc) != 2:
        return False
    size = len(code.encode("ascii")) + 1
    blocking = " || ".join(f"$orig_rax == {n}" for n in sorted(BLOCKING_SYSCALLS.values()))
    mmap = f"((void *(*)(void *, unsigned long, int, int, int, long)) {libc['mmap']:#x})"
    commands = [
        "set confirm off",
        "set pagination off",
        "set $safe = 0",
        f"if {blocking}",
        f"  if ((int (*)(void)) {python['PyGILState_Check']:#x})() == 0",
        "    set $safe = 1",
        "  end",
        "end",
        "if $safe",
        f"  set $page = {mmap}(0, {PAGE}, {PROT_READ_WRITE}, {MAP_PRIVATE_ANONYMOUS}, -1, 0)",
        f"  set {{char[{size}]}} $page = {_gdb_string(code)}",
        f"  set $state = ((int (*)(void)) {python['PyGILState_Ensure']:#x})()",
        f"  print (int) ((int (*)(void *)) {python['PyRun_SimpleString']:#x})($page)",
        f"  call ((void (*)(int)) {python['PyGILState_Release']:#x})($state)",
        f"  call (int) ((int (*)(void *, unsigned long)) {libc['munmap']:#x})($page, {PAGE})",
        "end",
        "detach",
        "quit",
    ]
    done = _run_gdb(target, commands)
    return "$1 = 0" in done.stdout


def gdb(target: TargetProcess, code: str) -> None:
    """Queues ``code`` in the target through gdb (see the module's documentation)."""
    done = _run_gdb(target, gdb_commands(target, code))
    if "$1 = 0" not in done.stdout:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise AttachError(f"gdb could not queue the payload in process {target.pid}: {why}")
