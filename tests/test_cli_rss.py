"""``memtape run``'s RSS figures say whose memory is whose: what the process held when the
capture started (the interpreter's start-up and memtape), what the program added to it
(anonymous, file-backed, shared), memtape's own share, and only then what memtape did not
see. Real programs through the real command; the kernel's own accounting
(``/proc/self/status``) is what the figures come from."""

from __future__ import annotations

import re
from pathlib import Path

from memtape_cli import memtape, ok, read_json, record, write_program

MiB = 2**20
# Allocator slack, page rounding and the interpreter's bookkeeping stay below this.
NOISE = 2 * MiB

ANONYMOUS_MAPPING = """
import mmap
mapped = mmap.mmap(-1, 64 << 20)  # anonymous, made by the mmap module: not seen
for offset in range(0, 64 << 20, 4096):
    mapped[offset] = 1
"""

FILE_MAPPING = """
import mmap, sys
with open(sys.argv[1], "rb") as f:
    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
total = sum(mapped[offset] for offset in range(0, len(mapped), 4096))
"""


def rss_of(capture: Path) -> dict[str, object]:
    rss: dict[str, object] = read_json("stats", capture)["rss"]
    return rss


def stats_row(capture: Path, name: str) -> str:
    stats = ok(memtape("stats", capture)).stdout
    match = re.search(rf"^\s*{re.escape(name)}:\s+(.*)$", stats, re.M)
    assert match, stats
    return match.group(1)


def test_a_program_that_allocates_nothing_has_no_unexplained_gap(tmp_path: Path) -> None:
    capture = tmp_path / "nothing.mtape"
    result = ok(memtape("run", "-o", capture, "-c", "x = 1"))
    rss = rss_of(capture)
    start, end = rss["at_start"], rss["at_end"]
    assert isinstance(start, dict) and isinstance(end, dict)
    # The interpreter and memtape, before the program ran: most of the process' RSS.
    assert start["rss"] > 8 * MiB and start["anon"] + start["file"] <= start["rss"], rss
    assert rss["peak_rss_bytes"] == end["hwm"], rss
    assert rss["not_seen_bytes"] == rss["untracked_bytes"] < NOISE, rss
    assert isinstance(rss["memtape_own_bytes"], int) and rss["memtape_own_bytes"] > 0, rss
    assert stats_row(capture, "not seen").startswith("none"), stats_row(capture, "not seen")
    # The end-of-run summary says the same, and names memtape's own share.
    assert "memtape: Peak RSS:" in result.stderr, result.stderr
    assert "memtape's own:" in result.stderr and "not seen: none" in result.stderr


def test_an_anonymous_mapping_memtape_cannot_see_is_still_not_seen(tmp_path: Path) -> None:
    script = write_program(tmp_path / "anonymous.py", ANONYMOUS_MAPPING)
    capture = tmp_path / "anonymous.mtape"
    record(script, capture)
    rss = rss_of(capture)
    assert rss["recorded_peak_bytes"] < MiB, rss  # the mapping is not recorded
    not_seen = rss["not_seen_bytes"]
    assert isinstance(not_seen, int) and 62 * MiB <= not_seen <= 66 * MiB, rss
    assert rss["untracked_bytes"] == not_seen
    row = stats_row(capture, "not seen")
    assert re.match(r"6[2-6]\.\d MiB \(anonymous and shared memory added", row), row


def test_a_file_read_through_mmap_is_file_backed(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * (64 * MiB // 256))
    script = write_program(tmp_path / "reads.py", FILE_MAPPING)
    capture = tmp_path / "reads.mtape"
    record(script, capture, str(data))
    rss = rss_of(capture)
    file_added = rss["file_added_bytes"]
    assert isinstance(file_added, int) and file_added >= 60 * MiB, rss
    assert rss["not_seen_bytes"] < NOISE, rss
    row = stats_row(capture, "RSS added")
    assert re.search(r"file-backed \+6\d\.\d MiB", row), row
