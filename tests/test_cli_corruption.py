"""Bad capture files through the real CLI: exit status 2 with a message that names the
file and the byte offset, never a Python traceback; a capture cut short still reads.

The thousands of damaged copies run through ``memtape.cli.main`` in one child process
(``memtape_cli_batch.py``: the same code path as the ``memtape`` command, minus the
interpreter start-up per file); a sample also runs through ``python -m memtape``.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from child_python import describe, run_python
from memtape_cli import capture_blocks, memtape, no_traceback, ok, read_json

BATCH_DRIVER = Path(__file__).with_name("memtape_cli_batch.py")
SEED = 20240611
FLIPS = 300
SMEARS = 60

# A small program that writes several blocks (the flusher runs every few ms) and a marker.
SMALL_PROGRAM = """
import time
import memtape._native as native
keep = []
for i in range(4):
    keep.append(bytearray(1000 + i))
    time.sleep(0.03)
native.mark("halfway")
keep.append([str(n) for n in range(50)])
"""

CUT_SHORT = re.compile(r"was cut short .*; read up to offset (\d+)")


@pytest.fixture(scope="module")
def small_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    capture = tmp_path_factory.mktemp("corruption") / "small.mtape"
    ok(memtape("run", "-q", "-o", capture, "-c", SMALL_PROGRAM))
    return capture


def run_batch(
    tmp_path: Path, source: Path, cases: list[dict[str, Any]], commands: list[list[str]]
) -> list[dict[str, Any]]:
    """Every case under every command, in one child; fails the test if the child dies."""
    job = tmp_path / "job.json"
    scratch = tmp_path / "damaged.mtape"
    job.write_text(
        json.dumps(
            {"source": str(source), "scratch": str(scratch), "cases": cases, "commands": commands}
        ),
        encoding="utf-8",
    )
    result = run_python([str(BATCH_DRIVER), str(job)], timeout=120)
    results = [json.loads(line) for line in result.stdout.splitlines()]
    if result.returncode != 0 or len(results) != len(cases) * len(commands):
        last = results[-1] if results else None
        raise AssertionError(
            f"the batch child died after {len(results)} runs (last: {last}; next case: "
            f"{cases[len(results) // len(commands)] if results else cases[0]})\n"
            + describe(result)[-4000:]
        )
    return results


def bad_file_problems(run: dict[str, Any], name: str) -> list[str]:
    """What is wrong with one run of a command on a damaged file (empty list: fine)."""
    problems = []
    if run["error"]:
        problems.append(f"raised instead of exiting:\n{run['error']}")
    if "Traceback" in run["stderr"]:
        problems.append(f"printed a traceback:\n{run['stderr']}")
    if run["code"] == 2:
        # An empty file has no offset to name; anything else says where it went wrong.
        if "offset" not in run["stderr"] and "(the file is empty)" not in run["stderr"]:
            problems.append(f"exit 2 without an offset: {run['stderr']!r}")
        if name not in run["stderr"]:
            problems.append(f"exit 2 without naming the file: {run['stderr']!r}")
    elif run["code"] != 0:
        problems.append(f"exit {run['code']!r}: {run['stderr']!r}")
    return problems


def test_every_truncation_reads_or_exits_2(small_capture: Path, tmp_path: Path) -> None:
    data = small_capture.read_bytes()
    header_end, blocks = capture_blocks(data)
    assert blocks and blocks[-1][1] == 2, "the capture does not end with a trailer block"
    assert blocks[-1][0] + blocks[-1][2] == len(data)
    block_ends = [header_end] + [offset + length for offset, _, length in blocks]

    cases = [{"truncate": n} for n in range(len(data) + 1)]
    results = run_batch(
        tmp_path, small_capture, cases, [["stats", "{file}"], ["stats", "{file}", "--json"]]
    )
    problems: list[str] = []
    events_before = 0
    for n in range(len(data) + 1):
        text, as_json = results[2 * n], results[2 * n + 1]
        for run in (text, as_json):
            for problem in bad_file_problems(run, "damaged.mtape"):
                problems.append(f"cut at {n}: {problem}")
        if n < header_end:
            # Without a whole header there is nothing to read.
            if text["code"] != 2:
                problems.append(f"cut at {n} (in the header): exit {text['code']}")
            elif n == 0 and "empty" not in text["stderr"]:
                problems.append(f"empty file: {text['stderr']!r}")
            continue
        # A whole header: the capture reads, up to its last complete block.
        if text["code"] != 0 or as_json["code"] != 0:
            problems.append(f"cut at {n}: exit {text['code']}/{as_json['code']}: {text['stderr']}")
            continue
        if n == len(data):
            if text["stderr"] or as_json["stderr"]:
                problems.append(f"the whole file printed {text['stderr']!r}")
            continue
        note = CUT_SHORT.search(text["stderr"])
        expected_at = max(end for end in block_ends if end <= n)
        if not note or int(note.group(1)) != expected_at:
            problems.append(f"cut at {n}: note {text['stderr']!r}, complete up to {expected_at}")
        if "Peak memory:" not in text["stdout"]:
            problems.append(f"cut at {n}: no statistics printed: {text['stdout'][:200]!r}")
        summary = json.loads(as_json["stdout"])
        if summary["run"]["cut_short"] is not True:
            problems.append(f"cut at {n}: --json says cut_short={summary['run']['cut_short']}")
        if summary["events"] < events_before:
            problems.append(f"cut at {n}: {summary['events']} events, fewer than before")
        events_before = summary["events"]
    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:15])
    full = json.loads(results[-1]["stdout"])
    assert full["run"]["cut_short"] is False and events_before == full["events"]


def damage_cases(data: bytes) -> list[dict[str, Any]]:
    """Every byte of the file header's fixed part, its CRC and every block header, each
    inverted; then seeded random single-byte changes and short random overwrites."""
    header_end, blocks = capture_blocks(data)
    structural = [*range(16), *range(header_end - 4, header_end)]
    for offset, _, _ in blocks:
        structural += range(offset, offset + 20)
    cases: list[dict[str, Any]] = [{"write": [at, [data[at] ^ 0xFF]]} for at in structural]
    rng = random.Random(SEED)
    for _ in range(FLIPS):
        at = rng.randrange(len(data))
        cases.append({"write": [at, [data[at] ^ rng.randrange(1, 256)]]})
    for _ in range(SMEARS):
        at = rng.randrange(len(data))
        cases.append({"write": [at, [rng.randrange(256) for _ in range(rng.randint(2, 64))]]})
    return cases


def test_damaged_bytes_exit_0_or_2(small_capture: Path, tmp_path: Path) -> None:
    cases = damage_cases(small_capture.read_bytes())
    commands = [["stats", "{file}"], ["top", "{file}", "--by", "traceback", "--at", "end"]]
    results = run_batch(tmp_path, small_capture, cases, commands)
    problems = [
        f"{cases[run['case']]} {run['command'][0]}: {problem}"
        for run in results
        for problem in bad_file_problems(run, "damaged.mtape")
    ]
    assert not problems, (
        f"{len(problems)} problems with damaged copies of {small_capture}, first ones:\n"
        + "\n".join(problems[:15])
    )
    # The damage was seen: a change inside a block (its reserved bytes aside) is refused or
    # read around with the warning; nothing goes unseen.
    data = small_capture.read_bytes()
    _, blocks = capture_blocks(data)
    checked = {at for offset, _, length in blocks for at in range(offset, offset + length)}
    checked -= {offset + at for offset, _, _ in blocks for at in (6, 7)}
    unseen = []
    for run in results:
        at, values = cases[run["case"]]["write"]
        changed = {at + i for i, v in enumerate(values) if at + i < len(data) and data[at + i] != v}
        seen = run["code"] == 2 or "is damaged: skipped the block at offset" in run["stderr"]
        if changed & checked and not seen:
            unseen.append(f"{cases[run['case']]} {run['command'][0]}: {run['stderr']!r}")
    assert not unseen, f"{len(unseen)} changes went unseen, first ones:\n" + "\n".join(unseen[:10])
    read_around = sum(
        1 for run in results[::2] if run["code"] == 0 and "is damaged" in run["stderr"]
    )
    assert read_around > len(cases) // 2, read_around


def test_truncated_captures_make_every_output(small_capture: Path, tmp_path: Path) -> None:
    """Every output of a capture cut short at many points: made, or refused with exit 2."""
    data = small_capture.read_bytes()
    header_end, _ = capture_blocks(data)
    out = tmp_path / "out"
    commands = [
        ["report", "{file}", "--force", "-o", f"{out}.html"],
        ["flamegraph", "{file}", "--force", "-o", f"{out}.fg.html"],
        ["flamegraph", "{file}", "--leaks", "--folded", "--force", "-o", f"{out}.folded"],
        ["export", "{file}", "--format", "torch", "--force", "-o", f"{out}.pickle"],
        ["export", "{file}", "--format", "tracemalloc", "--force", "-o", f"{out}.tm"],
        ["diff", "{file}", "--from", "start", "--to", "marker:halfway"],
        ["top", "{file}", "--by", "filename", "--at", "end"],
    ]
    cuts = sorted({*range(0, len(data), 7), header_end, len(data) - 1})
    results = run_batch(tmp_path, small_capture, [{"truncate": n} for n in cuts], commands)
    problems = []
    for run in results:
        n = cuts[run["case"]]
        for problem in bad_file_problems(run, "damaged.mtape"):
            problems.append(f"cut at {n}, {run['command'][0]}: {problem}")
        expect_ok = n >= header_end and run["command"][0] != "diff"
        if expect_ok and run["code"] != 0:
            problems.append(f"cut at {n}, {run['command']}: exit {run['code']}: {run['stderr']}")
    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:15])


def test_truncations_through_the_real_command(small_capture: Path, tmp_path: Path) -> None:
    data = small_capture.read_bytes()
    header_end, _ = capture_blocks(data)
    for n, expected in ((5, 2), (header_end - 1, 2), (header_end + 3, 0), (len(data) - 1, 0)):
        cut = tmp_path / f"cut{n}.mtape"
        cut.write_bytes(data[:n])
        result = memtape("stats", cut)
        assert result.returncode == expected, describe(result)
        assert no_traceback(result.stderr), describe(result)
        assert str(cut) in result.stderr and "offset" in result.stderr, describe(result)
        if expected == 0:
            assert "cut short" in result.stderr


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (PNG, "not a memtape capture"),
        (b"just some text\nnot a capture\n", "not a memtape capture"),
        (b"", "empty"),
        (b"MEMTAPE\x00\x63\x00\x00\x00\x02\x00\x00\x00{}\x00\x00\x00\x00", "version"),
        (b"MEMTAPE\x00\x01\x00\x00\x00\xff\xff\xff\x7f{}", "offset"),
    ],
    ids=["png", "text", "empty", "future-version", "huge-metadata"],
)
def test_foreign_files_exit_2(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "input.mtape"
    path.write_bytes(content)
    result = memtape("stats", path)
    assert result.returncode == 2, describe(result)
    assert result.stderr.startswith("memtape stats: ") and str(path) in result.stderr
    assert says in result.stderr, describe(result)
    assert no_traceback(result.stderr) and result.stdout == ""


def test_missing_file_and_directory_exit_2(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.mtape", tmp_path):
        result = memtape("stats", path)
        assert result.returncode == 2, describe(result)
        assert str(path) in result.stderr and no_traceback(result.stderr), describe(result)


READING_COMMANDS = [
    ["stats", "{bad}"],
    ["top", "{bad}"],
    ["diff", "{good}", "{bad}"],
    ["diff", "{bad}", "{good}"],
    ["diff", "{bad}", "--from", "start", "--to", "end"],
    ["flamegraph", "{bad}", "-o", "{out}"],
    ["flamegraph", "{bad}", "--folded", "--leaks", "-o", "{out}"],
    ["report", "{bad}", "-o", "{out}"],
    ["export", "{bad}", "--format", "torch", "-o", "{out}"],
    ["export", "{bad}", "--format", "tracemalloc", "-o", "{out}"],
    ["export", "{bad}", "--format", "json", "-o", "{out}"],
]


def command_id(argv: list[str]) -> str:
    return "-".join(a for a in argv if not a.startswith(("{", "-")))


def records_blocks(data: bytes) -> list[tuple[int, int]]:
    """``[(offset, length)]`` of a capture's records blocks (the trailer left out)."""
    _, blocks = capture_blocks(data)
    return [(offset, length) for offset, kind, length in blocks if kind == 1]


def flip_payload(data: bytearray, offset: int, length: int) -> None:
    """Changes one byte in the middle of the block's payload: its checksum fails."""
    assert length > 21
    data[offset + 20 + (length - 20) // 2] ^= 0xFF


@pytest.mark.parametrize("argv", READING_COMMANDS, ids=command_id)
def test_every_reading_command_reads_around_a_damaged_block(
    small_capture: Path, tmp_path: Path, argv: list[str]
) -> None:
    """The first block damaged: the rest is read, the warning printed once per command
    (naming the file and the block's offset), the output written, exit status 0."""
    bad = tmp_path / "bad.mtape"
    data = bytearray(small_capture.read_bytes())
    (offset, length), *rest = records_blocks(bytes(data))
    assert rest, "the capture has one records block only"
    flip_payload(data, offset, length)
    bad.write_bytes(bytes(data))
    out = tmp_path / "out.file"
    args = [a.format(bad=bad, good=small_capture, out=out) for a in argv]
    result = memtape(*args)
    assert result.returncode == 0, describe(result)
    warning = f"warning: {bad} is damaged: skipped the block at offset {offset} (checksum mismatch"
    assert result.stderr.count(warning) == 1, describe(result)
    assert result.stderr.count("is damaged") == 1, describe(result)
    assert "the figures are incomplete" in result.stderr
    assert no_traceback(result.stderr), describe(result)
    if "-o" in argv:
        assert out.stat().st_size > 0


@pytest.mark.parametrize("argv", READING_COMMANDS, ids=command_id)
def test_every_reading_command_refuses_a_file_with_no_good_block(
    small_capture: Path, tmp_path: Path, argv: list[str]
) -> None:
    """Every records block damaged: nothing usable remains, exit status 2 naming the
    first damaged block, no output written."""
    bad = tmp_path / "bad.mtape"
    data = bytearray(small_capture.read_bytes())
    blocks = records_blocks(bytes(data))
    for offset, length in blocks:
        flip_payload(data, offset, length)
    bad.write_bytes(bytes(data))
    out = tmp_path / "out.file"
    args = [a.format(bad=bad, good=small_capture, out=out) for a in argv]
    result = memtape(*args)
    assert result.returncode == 2, describe(result)
    command = argv[0]
    assert result.stderr == (
        f"memtape {command}: {bad}: corrupt block at offset {blocks[0][0]}: checksum mismatch; "
        "no records block after it checks out\n"
    ), describe(result)
    assert not out.exists(), "an output file was written for a capture with nothing to read"


DAMAGE_WARNING = re.compile(
    r"^memtape stats: warning: (?P<file>\S+) is damaged: skipped the block at offset "
    r"(?P<offset>\d+) \(checksum mismatch; (?P<bytes>[\d,]+) bytes, to offset (?P<resumed>\d+)\); "
    r"(?P<lost>[\d,]+) of (?P<written>[\d,]+) events lost; read the rest \((?P<blocks>[\d,]+) "
    r"blocks?, (?P<read>[\d,]+) events\): the figures are incomplete, without what the lost "
    r"part allocated and freed \(stacks defined there show as <lost in damaged block>"
    r"(?:; (?P<frees>[\d,]+) frees? after it of blocks not seen allocated, ignored)?"
    r"(?:; (?P<replaced>[\d,]+) allocations? after it at an address whose free was lost, "
    r"the old block counted as freed)?\)$"
)


def test_stats_reads_around_a_damaged_middle_block(tmp_path: Path) -> None:
    """A real capture with a block in the middle damaged reads exactly as the same capture
    with that block taken out, and the warning says what was lost."""
    capture = tmp_path / "run.mtape"
    ok(memtape("run", "-q", "-o", capture, "-c", MANY_BLOCKS_PROGRAM))
    data = capture.read_bytes()
    blocks = records_blocks(data)
    assert len(blocks) >= 5, f"{len(blocks)} records blocks"
    offset, length, unknown_in_block = block_that_allocates(data, blocks, tmp_path)
    damaged = bytearray(data)
    flip_payload(damaged, offset, length)
    bad = tmp_path / "bad.mtape"
    bad.write_bytes(bytes(damaged))
    without = tmp_path / "without.mtape"
    without.write_bytes(data[:offset] + data[offset + length :])

    full = read_json("stats", capture)
    expected = read_json("stats", without)
    result = memtape("stats", bad, "--json")
    assert result.returncode == 0, describe(result)
    got = json.loads(result.stdout)
    for key in ("events", "totals", "peak", "end", "markers", "dropped"):
        assert got[key] == expected[key], key
    assert got["events"] < full["events"]
    assert got["run"]["cut_short"] is False  # the trailer was read: the run ended cleanly

    lines = result.stderr.splitlines()
    assert len(lines) == 1, describe(result)
    warning = DAMAGE_WARNING.match(lines[0])
    assert warning, lines[0]

    def number(name: str) -> int:
        return int(warning[name].replace(",", ""))

    assert warning["file"] == str(bad)
    assert (number("offset"), number("bytes"), number("resumed")) == (
        offset,
        length,
        offset + length,
    )
    assert number("written") == full["events"]
    assert number("read") == expected["events"]
    assert number("lost") == full["events"] - expected["events"]
    assert number("blocks") == len(blocks) - 1
    assert got["run"]["damage"] == lines[0].split(" is damaged: ", 1)[1]
    # The program frees its lists at its end, a later block: the frees of what the lost
    # block allocated are counted apart. The lost block also took the frees in it of
    # blocks from before the capture (the interpreter's own), which no longer count.
    assert warning["frees"] and number("frees") > 0
    assert got["totals"]["unknown_frees"] > full["totals"]["unknown_frees"] - unknown_in_block, (
        got["totals"],
        full["totals"],
        unknown_in_block,
    )
    # An address whose free was lost, allocated again: the old block counts as freed, and
    # the note says how often (the whole capture has no such allocation).
    assert full["totals"]["replaced"] == 0
    replaced = got["totals"]["replaced"]
    assert (number("replaced") if warning["replaced"] else 0) == replaced

    # The text report reads the same, with the same one warning.
    text = memtape("stats", bad)
    assert (text.returncode, text.stderr) == (0, result.stderr), describe(text)
    assert "Peak memory:" in text.stdout


def block_that_allocates(
    data: bytes, blocks: list[tuple[int, int]], tmp_path: Path
) -> tuple[int, int, int]:
    """``(offset, length, unknown frees in it)`` of a records block, the middle one or the
    nearest after it, in which the program allocated one of its lists (300 strings) and
    which a later block with a list follows, so that the program's end, where the lists
    are freed, comes after it. (The flusher writes blocks by time: on a busy machine a
    block may hold a few stray events and no list.) The counts come from the capture cut
    short at each block's end."""
    totals = []
    for end in [blocks[0][0]] + [offset + length for offset, length in blocks]:
        (tmp_path / "cut.mtape").write_bytes(data[:end])
        totals.append(read_json("stats", tmp_path / "cut.mtape")["totals"])
    added = [
        {k: after[k] - before[k] for k in ("allocs", "unknown_frees")}
        for before, after in itertools.pairwise(totals)
    ]
    with_list = [i for i, counts in enumerate(added) if counts["allocs"] >= LIST_STRINGS]
    for i in with_list[:-1]:
        if i >= len(blocks) // 2:
            return (*blocks[i], added[i]["unknown_frees"])
    raise AssertionError(f"no block after the middle of {len(blocks)} allocates a list: {added}")


LIST_STRINGS = 300  # the strings of each list MANY_BLOCKS_PROGRAM makes
# Allocates a list in every block (the flusher writes a block every few ms) and keeps them
# all until the end, where they are freed together. Kept, not replaced: a list that
# replaced the one before took the addresses that list's strings had freed, so once a
# block was lost, the later frees of what it allocated landed on addresses the reader
# still held for the older strings (their frees were in the lost block) and were not
# unknown frees at all (seen on CPython 3.13 under load: 1 run in 8).
MANY_BLOCKS_PROGRAM = """
import time
kept = []
for i in range(30):
    kept.append([str(n) * 3 for n in range(300)])
    time.sleep(0.01)
kept.clear()
"""


FOREIGN_FILES = Path(__file__).with_name("foreign_files")


@pytest.mark.parametrize("name", ["memray_run.bin", "memray_run_no_compress.bin"])
def test_a_memray_capture_is_named(tmp_path: Path, name: str) -> None:
    """Real memray captures (see foreign_files/README.md), compressed and not."""
    path = tmp_path / name
    path.write_bytes((FOREIGN_FILES / name).read_bytes())
    for command in ("stats", "top", "report"):
        result = memtape(
            command, path, *(["-o", tmp_path / "out.html"] if command == "report" else [])
        )
        assert result.returncode == 2, describe(result)
        assert result.stdout == ""
        assert result.stderr == (
            f"memtape {command}: {path}: not a memtape capture: this is a memray capture "
            f"(memray's own reader opens it: memray stats {path})\n"
        )


FOREIGN_MAKERS = {
    "tracemalloc": (
        "import tracemalloc, sys; tracemalloc.start(); x = [bytes(100) for _ in range(9)]; "
        "tracemalloc.take_snapshot().dump(sys.argv[1])",
        "this is a tracemalloc snapshot (Snapshot.dump): load it with "
        "tracemalloc.Snapshot.load or memtape.tracemalloc.Snapshot.load",
    ),
    "torch": (
        "import memtape, sys; memtape.dump_snapshot(sys.argv[1], format='pickle')",
        "this is a PyTorch memory snapshot (a memory_viz pickle): open it in PyTorch's "
        "memory viewer, https://pytorch.org/memory_viz",
    ),
    "pickle": (
        "import pickle, sys; pickle.dump({'a': 1}, open(sys.argv[1], 'wb'))",
        "this is a Python pickle",
    ),
}


@pytest.mark.parametrize("kind", sorted(FOREIGN_MAKERS))
def test_a_pickle_is_named(tmp_path: Path, kind: str) -> None:
    code, says = FOREIGN_MAKERS[kind]
    path = tmp_path / "file.bin"
    made = run_python(["-c", code, str(path)])
    assert made.returncode == 0, describe(made)
    result = memtape("stats", path)
    assert result.returncode == 2, describe(result)
    assert result.stderr == f"memtape stats: {path}: not a memtape capture: {says}\n"


def test_a_gzipped_capture_and_a_report_are_named(small_capture: Path, tmp_path: Path) -> None:
    gz = tmp_path / "small capture.mtape.gz"
    gz.write_bytes(gzip.compress(small_capture.read_bytes()))
    result = memtape("stats", gz)
    assert (result.returncode, result.stderr) == (
        2,
        f"memtape stats: {gz}: not a memtape capture: this is a gzip-compressed file: if it "
        f"holds a capture, decompress it first (gunzip -k '{gz}')\n",
    ), describe(result)
    html = tmp_path / "report.html"
    ok(memtape("report", small_capture, "-o", html))
    result = memtape("top", html)
    assert (result.returncode, result.stderr) == (
        2,
        f"memtape top: {html}: not a memtape capture: this is an HTML page (memtape report "
        "writes one): open it in a browser\n",
    ), describe(result)


def test_a_damaged_child_capture_is_read_around_with_its_warning(tmp_path: Path) -> None:
    """A run that followed a child: the child's capture, damaged in one block, is still
    read with the set, and the warning names the child's file."""
    root = tmp_path / "run.mtape"
    code = (
        "import subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {MANY_BLOCKS_PROGRAM!r}], check=True)"
    )
    ok(memtape("run", "-q", "--follow-children", "-o", root, "-c", code))
    (child,) = tmp_path.glob("run.*.mtape")
    data = bytearray(child.read_bytes())
    blocks = records_blocks(bytes(data))
    assert len(blocks) >= 3, f"{len(blocks)} records blocks in the child's capture"
    offset, length = blocks[1]
    flip_payload(data, offset, length)
    child.write_bytes(bytes(data))
    result = memtape("stats", root)
    assert result.returncode == 0, describe(result)
    assert result.stderr.startswith(
        f"memtape stats: warning: {child} is damaged: skipped the block at offset {offset} "
        "(checksum mismatch"
    ), describe(result)
    assert result.stderr.count("is damaged") == 1, describe(result)
    assert "skipping" not in result.stderr, describe(result)
