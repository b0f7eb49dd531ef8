"""scripts/rustflags_with.sh: the rustc flags the profile-guided build passes to cargo.

scripts/pgo_build.sh adds ``-Cprofile-generate=DIR`` and ``-Cprofile-use=FILE`` to the
caller's own flags. Through ``RUSTFLAGS``, which cargo splits on white space, a checkout
whose path holds a space lost its profile (the build fell back to a plain one); the
script now hands them over in ``CARGO_ENCODED_RUSTFLAGS`` (flags separated by 0x1f), with
the caller's flags read as cargo reads them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "rustflags_with.sh"
SEP = "\x1f"


def encoded(env: dict[str, str], *flags: str) -> list[str]:
    """The flags the script prints for `flags` under `env` (and nothing else of cargo's)."""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS")
    }
    out = subprocess.run(
        ["bash", str(SCRIPT), *flags],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split(SEP) if out else []


def test_a_path_with_spaces_stays_one_flag() -> None:
    flag = "-Cprofile-use=/home/me/My Projects/memtape/target/pgo-data/3.11/memtape.profdata"
    assert encoded({}, flag) == [flag]


def test_the_callers_rustflags_come_first_split_as_cargo_splits_them() -> None:
    flags = encoded({"RUSTFLAGS": "  -Copt-level=3 \t -Cdebuginfo=1 "}, "-Cprofile-generate=/a b")
    assert flags == ["-Copt-level=3", "-Cdebuginfo=1", "-Cprofile-generate=/a b"]


def test_encoded_flags_win_over_rustflags_and_keep_their_spaces() -> None:
    env = {"CARGO_ENCODED_RUSTFLAGS": f"-Ca{SEP}-Clink-arg=/x y/z", "RUSTFLAGS": "-Cignored"}
    assert encoded(env, "-Cp") == ["-Ca", "-Clink-arg=/x y/z", "-Cp"]


def test_set_but_empty_encoded_flags_mean_none() -> None:
    # cargo ignores RUSTFLAGS once CARGO_ENCODED_RUSTFLAGS is set, even to nothing.
    assert encoded({"CARGO_ENCODED_RUSTFLAGS": "", "RUSTFLAGS": "-Cignored"}, "-Cp") == ["-Cp"]


@pytest.mark.parametrize("flags", [(), ("-Ca", "-Cb")])
def test_every_argument_is_one_flag(flags: tuple[str, ...]) -> None:
    assert encoded({}, *flags) == list(flags)
