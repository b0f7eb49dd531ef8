"""A capture's metadata names the platform as ``platform.platform()`` does, without the
fork of ``uname -p`` that made it cost 12-15 ms of every ``memtape run``'s start."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest
from memtape.capture_metadata import capture_metadata, platform_name


def test_the_platform_is_what_the_standard_library_says() -> None:
    assert platform_name() == platform.platform()


def test_the_metadata_carries_it() -> None:
    meta = json.loads(
        capture_metadata(
            command="code", argv=["x"], nframe=1, min_size=0, native_heap=False, launcher_files=None
        )
    )
    assert meta["platform"] == platform.platform()
    assert meta["python"] == platform.python_version()


@pytest.mark.skipif(sys.platform != "linux", reason="the fork it avoids is Linux's")
def test_naming_the_platform_starts_no_process() -> None:
    # Run in a child whose subprocess module refuses to start anything: the standard
    # library's platform() would fork `uname -p` there.
    code = (
        "import subprocess\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('a process was started')\n"
        "subprocess.Popen = refuse\n"
        "from memtape.capture_metadata import platform_name\n"
        "print(platform_name())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == platform.platform()
