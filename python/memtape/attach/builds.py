"""Which memtape build the target loads: a memtape package directory holding the
extension for the target's CPython (``_native.cpython-3XY-*.so``), found beside the
running memtape or in the directories ``MEMTAPE_BUILDS`` lists (``os.pathsep``
separated; each a ``memtape`` package directory or a directory holding one). memtape
need not be installed in the target's environment: the payload imports it from here by
absolute path."""

from __future__ import annotations

import glob
import os
import stat

from memtape.attach.target_process import AttachError, TargetProcess

ENV_VAR = "MEMTAPE_BUILDS"


def _candidates() -> list[str]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [here]
    for listed in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if not listed:
            continue
        entry = os.path.abspath(listed)
        package = entry if os.path.basename(entry) == "memtape" else os.path.join(entry, "memtape")
        if package not in found:
            found.append(package)
    return found


def _readable_by(path: str, target: TargetProcess) -> bool:
    """Whether the target's user may read ``path`` (roughly: owner, group or others)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if target.uid == 0:
        return True
    if os.stat(path).st_uid == target.uid:
        return bool(mode & stat.S_IRUSR)
    if os.stat(path).st_gid == target.gid:
        return bool(mode & stat.S_IRGRP)
    return bool(mode & stat.S_IROTH)


def build_for(target: TargetProcess) -> str:
    """The memtape package directory the target imports, or an AttachError naming what is
    missing."""
    tag = f"cpython-{target.version[0]}{target.version[1]}-"
    looked = _candidates()
    for package in looked:
        extensions = glob.glob(os.path.join(glob.escape(package), f"_native.{tag}*.so"))
        if extensions and os.path.isfile(os.path.join(package, "attach", "bootstrap.py")):
            if not _readable_by(extensions[0], target):
                raise AttachError(
                    f"the memtape build {extensions[0]} is not readable by the target's "
                    f"user ({target.uid})"
                )
            return package
    raise AttachError(
        f"no memtape build for CPython {target.version_text}: no _native.{tag}*.so in "
        f"{', '.join(looked)} (build memtape for {target.version_text}, or name a "
        f"directory holding that build in {ENV_VAR})"
    )
