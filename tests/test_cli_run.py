"""``memtape run``: records the program's memory and runs it exactly as ``python`` would.

Every program here is a real file run through the real command (``python -m memtape``,
and the ``memtape`` console script where the difference matters); lines that matter are
marked ``# @tm:<tag>`` and found with ``line_of``, never hard-coded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from child_python import describe, run_python
from memtape_cli import (
    Site,
    console_script,
    folded_by_leaf,
    memtape,
    memtape_frames,
    ok,
    python,
    read_json,
    record,
    sites,
    within,
    write_program,
)
from source_lines import line_of

MiB = 2**20
PEAK_BYTES = 100 * MiB
LEAK_BLOCKS, LEAK_BLOCK_BYTES = 200, 5_000

PEAK_AND_LEAK = f"""
leaks = []


def make_peak():
    buf = bytearray({PEAK_BYTES})  # @tm:peak
    return len(buf)


def leak():
    for _ in range({LEAK_BLOCKS}):
        leaks.append(bytearray({LEAK_BLOCK_BYTES}))  # @tm:leak


print("peak", make_peak())
leak()
"""


@pytest.fixture(scope="module")
def peak_and_leak(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(script, capture) of a program with a 100 MiB peak, freed, and a never-freed list."""
    root = tmp_path_factory.mktemp("peak_and_leak")
    script = write_program(root / "peak_and_leak.py", PEAK_AND_LEAK)
    capture = root / "peak_and_leak.mtape"
    result = record(script, capture)
    assert result.stdout == f"peak {PEAK_BYTES}\n", describe(result)
    return script, capture


def test_peak_is_the_known_line_in_stats(peak_and_leak: tuple[Path, Path]) -> None:
    script, capture = peak_and_leak
    stats = read_json("stats", capture)
    assert stats["peak"]["bytes"] >= PEAK_BYTES
    top = Site.of(stats["top"][0])
    assert top.at(script, line_of(script, "peak")), top
    assert top.function == "make_peak"
    assert within(top.bytes, PEAK_BYTES), top


def test_peak_is_the_known_line_in_top(peak_and_leak: tuple[Path, Path]) -> None:
    script, capture = peak_and_leak
    top = read_json("top", capture, "--at", "peak")
    assert top["total_bytes"] >= PEAK_BYTES
    first = Site.of(top["sites"][0])
    assert first.at(script, line_of(script, "peak")), first
    assert within(first.bytes, PEAK_BYTES), first


def test_leak_is_the_top_site_at_the_end(peak_and_leak: tuple[Path, Path]) -> None:
    script, capture = peak_and_leak
    top = read_json("top", capture, "--at", "end")
    first = Site.of(top["sites"][0])
    assert first.at(script, line_of(script, "leak")), first
    assert first.bytes >= LEAK_BLOCKS * LEAK_BLOCK_BYTES
    assert first.count >= LEAK_BLOCKS
    # The 100 MiB block was freed: nothing of it is live at the end.
    peak_line = line_of(script, "peak")
    assert not [s for s in sites(top["sites"]) if s.at(script, peak_line)]
    assert top["total_bytes"] < PEAK_BYTES


def test_leak_tops_the_folded_leak_flamegraph(
    peak_and_leak: tuple[Path, Path], tmp_path: Path
) -> None:
    script, capture = peak_and_leak
    folded = tmp_path / "leaks.folded"
    ok(memtape("flamegraph", capture, "--leaks", "--folded", "-o", folded))
    by_leaf = folded_by_leaf(folded.read_text(encoding="utf-8"))
    heaviest = max(by_leaf, key=by_leaf.__getitem__)
    assert heaviest == f"leak ({script}:{line_of(script, 'leak')})", heaviest
    assert by_leaf[heaviest] >= LEAK_BLOCKS * LEAK_BLOCK_BYTES


def test_folded_flamegraph_at_the_peak_is_led_by_the_peak(
    peak_and_leak: tuple[Path, Path], tmp_path: Path
) -> None:
    script, capture = peak_and_leak
    folded = tmp_path / "peak.folded"
    ok(memtape("flamegraph", capture, "--folded", "-o", folded))
    by_leaf = folded_by_leaf(folded.read_text(encoding="utf-8"))
    heaviest = max(by_leaf, key=by_leaf.__getitem__)
    assert heaviest == f"make_peak ({script}:{line_of(script, 'peak')})", heaviest
    assert within(by_leaf[heaviest], PEAK_BYTES)


RAISES = """
def fail():
    raise ValueError("the program's own error")  # @tm:raise


def main():
    fail()  # @tm:call


main()
"""


@pytest.mark.parametrize("folder", ["plain", "runpy_examples"])
def test_exception_exits_1_with_the_users_traceback(tmp_path: Path, folder: str) -> None:
    """The traceback is python's own, frame for frame (wherever the script lives: a
    folder whose name contains "runpy" is the user's, not runpy's)."""
    (tmp_path / folder).mkdir()
    script = write_program(tmp_path / folder / "raises.py", RAISES)
    capture = tmp_path / "raises.mtape"
    result = record(script, capture, expect_exit=1)
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "ValueError: the program's own error", describe(result)
    assert lines[0] == "Traceback (most recent call last):", describe(result)
    assert f'File "{script}", line {line_of(script, "raise")}, in fail' in result.stderr
    assert f'File "{script}", line {line_of(script, "call")}, in main' in result.stderr
    assert memtape_frames(result.stderr) == [], describe(result)
    plain = python(script)
    assert plain.returncode == 1
    assert result.stderr == plain.stderr
    # The capture ended cleanly and says how the program ended.
    stats = read_json("stats", capture)
    assert stats["run"]["exit"] == "exception"
    assert stats["run"]["cut_short"] is False


def test_exception_in_c_code_matches_python(tmp_path: Path) -> None:
    code = "def f():\n    raise KeyError('k')\nf()\n"
    result = memtape("run", "-q", "-o", tmp_path / "c.mtape", "-c", code)
    plain = python("-c", code)
    assert plain.returncode == 1 and plain.stderr.rstrip().endswith("KeyError: 'k'")
    assert (result.returncode, result.stderr) == (1, plain.stderr), describe(result)


@pytest.mark.parametrize("call", ["sys.exit(3)", "sys.exit(0)", "sys.exit()", "sys.exit('bye')"])
def test_system_exit_status_is_the_programs(tmp_path: Path, call: str) -> None:
    script = write_program(tmp_path / "exits.py", f"import sys\nprint('out')\n{call}\n")
    capture = tmp_path / "exits.mtape"
    result = memtape("run", "-q", "-o", capture, script)
    plain = python(script)
    assert (result.returncode, result.stdout, result.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    ), describe(result)
    stats = read_json("stats", capture)
    assert stats["run"]["cut_short"] is False


def test_exit_3(tmp_path: Path) -> None:
    script = write_program(tmp_path / "three.py", "import sys\nsys.exit(3)\n")
    result = memtape("run", "-q", "-o", tmp_path / "three.mtape", script)
    assert result.returncode == 3, describe(result)
    assert result.stderr == ""


ARGV_PROBE = """
import json
import sys

keep = [bytearray(300_000)]  # @tm:alloc
print(json.dumps({"argv": sys.argv, "name": __name__}))
"""


def test_script_argv_is_pythons(tmp_path: Path) -> None:
    script = write_program(tmp_path / "probe.py", ARGV_PROBE)
    args = ("a", "-b", "--c=d", "-m", "x y")
    capture = tmp_path / "probe.mtape"
    result = record(script, capture, *args)
    assert json.loads(result.stdout) == {"argv": [str(script), *args], "name": "__main__"}
    assert result.stdout == python(script, *args).stdout
    assert read_json("stats", capture)["run"]["argv"] == [str(script), *args]


def test_script_globals_are_pythons(tmp_path: Path) -> None:
    """``__file__``, ``sys.path[0]`` and ``__main__`` as ``python script.py`` sets them,
    with the script given by a relative path."""
    write_program(
        tmp_path / "globals_probe.py",
        """
        import sys
        print(__file__)
        print(sys.path[0])
        print(sys.modules["__main__"].__dict__ is globals())
        """,
    )
    result = record(Path("globals_probe.py"), tmp_path / "g.mtape", cwd=tmp_path)
    plain = python("globals_probe.py", cwd=tmp_path)
    assert result.stdout == plain.stdout, f"memtape:\n{result.stdout}\npython:\n{plain.stdout}"


def test_module_runs_like_python_dash_m(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    (lib / "mtpkg").mkdir(parents=True)
    (lib / "mtpkg" / "__init__.py").write_text("", encoding="utf-8")
    tool = write_program(lib / "mtpkg" / "tool.py", ARGV_PROBE)
    env = {"PYTHONPATH": str(lib)}
    capture = tmp_path / "module.mtape"
    result = memtape(
        "run", "-q", "-o", capture, "-m", "mtpkg.tool", "a", "-c", "x", cwd=tmp_path, env=env
    )
    ok(result)
    plain = python("-m", "mtpkg.tool", "a", "-c", "x", cwd=tmp_path, env=env)
    assert json.loads(result.stdout) == {"argv": [str(tool), "a", "-c", "x"], "name": "__main__"}
    assert result.stdout == plain.stdout
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    assert top.at(tool, line_of(tool, "alloc")), top


def test_console_script_finds_a_module_in_the_current_directory(tmp_path: Path) -> None:
    """``python -m mod`` puts the current directory first on sys.path; so must
    ``memtape run -m mod``, started from the ``memtape`` console script."""
    write_program(tmp_path / "localmod.py", 'import sys\nprint("ran", sys.path[0])\n')
    result = run_python(
        [console_script(), "run", "-q", "-o", "m.mtape", "-m", "localmod"], cwd=tmp_path
    )
    plain = python("-m", "localmod", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, plain.stdout), describe(result)


def test_c_code_argv_is_pythons(tmp_path: Path) -> None:
    code = "import json, sys; print(json.dumps([sys.argv, __name__, sys.path[0]]))"
    capture = tmp_path / "c.mtape"
    result = ok(memtape("run", "-q", "-o", capture, "-c", code, "1", "--two"))
    assert json.loads(result.stdout) == [["-c", "1", "--two"], "__main__", ""]
    assert result.stdout == python("-c", code, "1", "--two").stdout
    stats = read_json("stats", capture)
    assert stats["run"]["command"] == "code"


def test_c_code_runs_in_the_main_module(tmp_path: Path) -> None:
    """Code given with -c runs in ``__main__``'s namespace, as ``python -c`` does, so
    that e.g. a class it defines can be pickled."""
    code = (
        "import pickle, sys\n"
        "class Point:\n    pass\n"
        "print(sys.modules['__main__'].__dict__ is globals())\n"
        "print(type(pickle.loads(pickle.dumps(Point()))).__name__)\n"
    )
    result = memtape("run", "-q", "-o", tmp_path / "c.mtape", "-c", code)
    plain = python("-c", code)
    assert plain.stdout == "True\nPoint\n"
    assert (result.returncode, result.stdout) == (0, plain.stdout), describe(result)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    script = write_program(
        tmp_path / "touch.py",
        f"open({str(ran)!r}, 'a').write('x')\nkeep = bytearray(1 << 20)  # @tm:alloc\n",
    )
    capture = tmp_path / "existing.mtape"
    capture.write_bytes(b"not yours to overwrite")
    refused = memtape("run", "-o", capture, script)
    assert refused.returncode == 2, describe(refused)
    assert str(capture) in refused.stderr and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert capture.read_bytes() == b"not yours to overwrite"
    assert not ran.exists(), "the program ran although the capture was refused"

    forced = memtape("run", "-q", "--force", "-o", capture, script)
    ok(forced)
    assert ran.read_text() == "x"
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    assert top.at(script, line_of(script, "alloc")), top


def test_min_size_drops_small_blocks(tmp_path: Path) -> None:
    script = write_program(
        tmp_path / "sizes.py",
        """
        small = [None] * 2000
        for i in range(2000):
            small[i] = bytearray(40)  # @tm:small
        big = bytearray(200_000)  # @tm:big
        """,
    )
    small_line, big_line = line_of(script, "small"), line_of(script, "big")

    everything = tmp_path / "all.mtape"
    record(script, everything)
    all_sites = sites(read_json("top", everything, "--at", "end", "--limit", "1000")["sites"])
    assert [s for s in all_sites if s.at(script, small_line) and s.count >= 2000]

    filtered = tmp_path / "filtered.mtape"
    record(script, filtered, options=("--min-size", "4096"))
    kept = sites(read_json("top", filtered, "--at", "end", "--limit", "1000")["sites"])
    assert not [s for s in kept if s.at(script, small_line)], kept
    assert [s for s in kept if s.at(script, big_line) and s.bytes >= 200_000]
    assert all(s.bytes >= 4096 * s.count for s in kept), kept


def test_bad_options_exit_2(tmp_path: Path) -> None:
    for argv in (["run"], ["run", "--min-size", "-5", "x.py"], ["run", "--nframe", "zero"]):
        result = memtape(*argv, cwd=tmp_path)
        assert result.returncode == 2, describe(result)
        assert "usage" in result.stderr and "Traceback" not in result.stderr


OUTPUT = """
import sys
print("line one")
sys.stdout.write("no newline")
sys.stdout.flush()
sys.stdout.buffer.write(b"raw bytes\\n")
print("to stderr", file=sys.stderr)
keep = bytearray(1 << 20)
"""


def test_quiet_suppresses_the_summary(tmp_path: Path) -> None:
    script = write_program(tmp_path / "out.py", OUTPUT)
    quiet = memtape("run", "-q", "-o", tmp_path / "q.mtape", script)
    assert quiet.stderr == "to stderr\n", describe(quiet)


def test_summary_on_stderr_names_the_peak_and_the_next_commands(
    peak_and_leak: tuple[Path, Path], tmp_path: Path
) -> None:
    script, _ = peak_and_leak
    capture = tmp_path / "loud.mtape"
    result = ok(memtape("run", "-o", capture, script))
    assert result.stdout == f"peak {PEAK_BYTES}\n"
    err = result.stderr
    assert "peak 100." in err and "MiB" in err, err
    assert f"{script}:{line_of(script, 'peak')} in make_peak" in err, err
    assert f"memtape stats {capture}" in err, err
    assert f"memtape report {capture}" in err, err


@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "summary"])
def test_program_stdout_is_untouched(tmp_path: Path, quiet: bool) -> None:
    script = write_program(tmp_path / "out.py", OUTPUT)
    options = ["-q"] if quiet else []
    result = memtape("run", *options, "-o", tmp_path / "o.mtape", script)
    ok(result)
    plain = python(script).stdout
    assert plain == "line one\nno newlineraw bytes\n"
    assert result.stdout == plain, (result.stdout, plain)
    assert result.stderr.startswith("to stderr\n")


def test_default_output_name(tmp_path: Path) -> None:
    script = write_program(tmp_path / "named.py", "keep = bytearray(1 << 16)\n")
    result = ok(memtape("run", "-q", script, cwd=tmp_path))
    made = sorted(p.name for p in tmp_path.glob("*.mtape"))
    assert len(made) == 1 and made[0].startswith("memtape-named-"), (made, describe(result))
    ok(memtape("stats", tmp_path / made[0]))


def test_console_script_runs_like_python_m_memtape(tmp_path: Path) -> None:
    script = write_program(tmp_path / "probe.py", ARGV_PROBE)
    capture = tmp_path / "console.mtape"
    result = run_python(
        [console_script(), "run", "-q", "-o", str(capture), str(script), "x"], cwd=tmp_path
    )
    ok(result)
    assert json.loads(result.stdout) == {"argv": [str(script), "x"], "name": "__main__"}
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    assert top.at(script, line_of(script, "alloc")), top


def test_keyboard_interrupt_ends_like_python(tmp_path: Path) -> None:
    """An uncaught KeyboardInterrupt ends python by SIGINT (so that a shell loop stops)."""
    script = write_program(tmp_path / "interrupted.py", "raise KeyboardInterrupt\n")
    capture = tmp_path / "interrupted.mtape"
    result = memtape("run", "-q", "-o", capture, script)
    plain = python(script)
    assert result.stderr == plain.stderr
    assert result.returncode == plain.returncode, describe(result)
    assert read_json("stats", capture)["run"]["exit"] == "signal"


def test_non_daemon_threads_are_recorded_until_they_end(tmp_path: Path) -> None:
    """python waits for non-daemon threads before it exits; what they allocate after the
    main module returned belongs in the capture."""
    script = write_program(
        tmp_path / "threads.py",
        """
        import threading

        main_done = threading.Event()
        kept = []


        def worker():
            main_done.wait()
            for _ in range(200):
                kept.append(bytearray(10_000))  # @tm:worker
            print("worker done")


        threading.Thread(target=worker).start()
        print("main done")
        main_done.set()
        """,
    )
    capture = tmp_path / "threads.mtape"
    result = record(script, capture)
    assert result.stdout == "main done\nworker done\n"
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    assert top.at(script, line_of(script, "worker")) and top.bytes >= 2_000_000, top


def test_relative_output_survives_the_program_changing_directory(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    script = write_program(
        tmp_path / "moves.py",
        "import os\nos.chdir('elsewhere')\nkeep = bytearray(3_000_000)  # @tm:alloc\n",
    )
    result = ok(memtape("run", "-o", "moves.mtape", script, cwd=tmp_path))
    assert (tmp_path / "moves.mtape").is_file()
    assert "cannot summarize" not in result.stderr, describe(result)
    assert f"{script}:{line_of(script, 'alloc')}" in result.stderr, describe(result)


def test_program_closing_stdout(tmp_path: Path) -> None:
    script = write_program(tmp_path / "closes.py", "import sys\nprint('bye')\nsys.stdout.close()\n")
    result = memtape("run", "-q", "-o", tmp_path / "closes.mtape", script)
    plain = python(script)
    assert (result.returncode, result.stdout, result.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    ), describe(result)
