"""What ``memtape attach`` learns about the process it is asked to record, before it
touches it: which CPython runs there, and every reason to refuse (each a one-line
:class:`AttachError`). Everything here only reads ``/proc``; the target is left as it was."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from memtape.attach.elf_symbols import file_mappings, symbol_addresses

OLDEST, NEWEST = (3, 11), (3, 15)
#: From 3.14 on the interpreter runs a debugger's script at a safe point (PEP 768).
REMOTE_EXEC_FROM = (3, 14)
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
#: The cookie that starts ``_Py_DebugOffsets`` (at the start of ``_PyRuntime``).
DEBUG_COOKIE = b"xdebugpy"
PYTHON_NAME = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)(t?)(?:[^/]*)$")


class AttachError(Exception):
    """Why memtape will not attach (or detach): one line for the user, exit status 2."""


@dataclass(frozen=True)
class TargetProcess:
    """A running CPython process memtape may attach to."""

    pid: int
    #: ``(major, minor)`` of the interpreter running in it.
    version: tuple[int, int]
    #: The file exporting the C API (the executable, or ``libpython3.X.so``).
    python_file: str
    #: The executable, as the target's root sees it.
    executable: str
    #: Clock ticks since boot when it started (``/proc/PID/stat``): with the pid, names
    #: this process and not a later one reusing its pid.
    start_ticks: int
    uid: int
    gid: int

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def proc_state(pid: int) -> tuple[str, int]:
    """The process' state letter and start time (``/proc/PID/stat``); AttachError when
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    except OSError as exc:
        raise AttachError(f"cannot read /proc/{pid}/stat: {exc.strerror}") from None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def is_alive(pid: int, start_ticks: int) -> bool:
    """Whether process ``pid`` is still the one that started at ``start_ticks`` and has
    not exited (a zombie has)."""
    try:
        state, started = proc_state(pid)
    except AttachError:
        return False
    return started == start_ticks and state not in ("Z", "X")


def _yama_note() -> str:
    try:
        with open(YAMA_SCOPE, encoding="ascii") as f:
            scope = f.read().strip()
    except OSError:
        return ""
    meaning = {
        "0": "any process of the same user may be traced",
        "1": "only a parent may trace its child, unless the tracer has CAP_SYS_PTRACE",
        "2": "only a tracer with CAP_SYS_PTRACE (root)",
        "3": "no process may be traced",
    }.get(scope, "unknown setting")
    return f"; Yama's {YAMA_SCOPE} is {scope}: {meaning}"


def check_rights(pid: int, uid: int) -> None:
    """AttachError unless this process may trace ``pid`` (what both attach routes need:
    gdb's ptrace, or PEP 768's writes into its memory). Opening ``/proc/PID/mem`` asks
    the kernel the same question, Yama included, without stopping the target."""
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
    except PermissionError:
        if uid == os.geteuid():
            needs = (
                "the kernel refuses although the user is the same: the target may be "
                "non-dumpable (a setuid program, prctl PR_SET_DUMPABLE), or memtape lacks "
                "CAP_SYS_PTRACE"
            )
        else:
            needs = "attaching needs the target's user or CAP_SYS_PTRACE (root)"
        raise AttachError(
            f"no permission to trace process {pid} (user {uid}; memtape runs as user "
            f"{os.geteuid()}): {needs}{_yama_note()}"
        ) from None
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None


def _read_memory(pid: int, address: int, size: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(address)
        return mem.read(size)


def _python_file(pid: int, executable: str) -> tuple[str, dict[str, int]] | None:
    """The mapped file that exports the C API, and where its symbols lie."""
    names = {"Py_Version", "_PyRuntime", "Py_AddPendingCall"}
    libraries = {m.path for m in file_mappings(pid) if "libpython" in os.path.basename(m.path)}
    candidates = [executable, *sorted(libraries)]
    for path in candidates:
        try:
            found = symbol_addresses(pid, path, names)
        except (OSError, ValueError, IndexError):
            continue
        if "_PyRuntime" in found:
            return path, found
    return None


def _unsupported_python(pid: int, executable: str) -> str | None:
    """The version a Python too old for ``Py_Version`` (before 3.11) names itself by."""
    for path in [executable, *(m.path for m in file_mappings(pid))]:
        match = PYTHON_NAME.search(path)
        if match:
            return f"{match[1]}.{match[2]}{match[3]}"
    return None


def _free_threaded(pid: int, path: str, version: tuple[int, int], runtime: int) -> bool:
    """Whether the interpreter is a free-threaded build: its file is named so
    (``python3.13t``), or, from 3.14 on, its ``_Py_DebugOffsets`` say so."""
    match = PYTHON_NAME.search(path)
    if match and match[3] == "t":
        return True
    if version < REMOTE_EXEC_FROM:
        return False
    head = _read_memory(pid, runtime, 24)
    return head[:8] == DEBUG_COOKIE and int.from_bytes(head[16:24], "little") != 0


def _remote_debug_disabled(pid: int) -> str | None:
    """How the target turned PEP 768 off (3.14+), as its environment or command line
    says, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        return None
    if any(v.startswith(b"PYTHON_DISABLE_REMOTE_DEBUG=") and len(v) > 28 for v in environ):
        return "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"
    for i, arg in enumerate(cmdline[1:], 1):
        if arg == b"-X" and i + 1 < len(cmdline) and cmdline[i + 1] == b"disable-remote-debug":
            return "it runs with -X disable-remote-debug"
        if arg == b"-Xdisable-remote-debug":
            return "it runs with -X disable-remote-debug"
        if not arg.startswith(b"-"):
            break  # the script: the rest are its own arguments
    return None


def open_captures(pid: int) -> list[str]:
    """The capture files (``.mtape``) the process has open: memtape records it."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    found = []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".mtape"):
            found.append(target)
    return found


def inspect(pid: int) -> TargetProcess:
    """The CPython process ``pid``, or an AttachError saying why memtape cannot attach to it;
    reads ``/proc`` only."""
    if pid <= 0:
        raise AttachError(f"no process {pid}")
    if pid == os.getpid():
        raise AttachError(f"process {pid} is memtape itself")
    state, start_ticks = proc_state(pid)
    if state in ("Z", "X"):
        raise AttachError(f"process {pid} has exited")
    try:
        owner = os.stat(f"/proc/{pid}")
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    check_rights(pid, owner.st_uid)
    if state in ("T", "t"):
        raise AttachError(
            f"process {pid} is stopped (state {state}: Ctrl-Z, SIGSTOP or a debugger): "
            f"resume it first (fg, or kill -CONT {pid})"
        )
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
        found = _python_file(pid, executable)
    except OSError as exc:
        raise AttachError(f"cannot read process {pid}: {exc.strerror}") from None
    if found is None:
        older = _unsupported_python(pid, executable)
        if older is not None:
            raise AttachError(
                f"process {pid} runs Python {older}: memtape attaches to CPython 3.11 to 3.15"
            )
        raise AttachError(f"process {pid} is not a CPython process ({executable})")
    path, symbols = found
    if "Py_Version" not in symbols:
        older = _unsupported_python(pid, executable) or "older than 3.11"
        raise AttachError(f"process {pid} runs CPython {older}: memtape attaches to 3.11 to 3.15")
    hex_version = int.from_bytes(_read_memory(pid, symbols["Py_Version"], 4), "little")
    version = (hex_version >> 24, (hex_version >> 16) & 0xFF)
    shown = f"{version[0]}.{version[1]}"
    if not OLDEST <= version <= NEWEST:
        raise AttachError(f"process {pid} runs CPython {shown}: memtape attaches to 3.11 to 3.15")
    if _free_threaded(pid, path, version, symbols["_PyRuntime"]):
        raise AttachError(
            f"process {pid} runs a free-threaded CPython {shown}t: memtape records "
            "builds with the GIL only"
        )
    if version >= REMOTE_EXEC_FROM:
        disabled = _remote_debug_disabled(pid)
        if disabled is not None:
            raise AttachError(f"process {pid} has remote debugging disabled: {disabled}")
    return TargetProcess(pid, version, path, executable, start_ticks, owner.st_uid, owner.st_gid)
