"""memtape only: memtape as the process's tracer.

Under ``MEMTAPE_TRACEMALLOC=N`` and ``python -m memtape.tracemalloc`` (and after
``memtape.tracemalloc.install()``) every caller of the standard library's ``tracemalloc``
gets memtape's answers: ``warnings`` prints a ResourceWarning's "Object allocated at" as it
does under ``python -X tracemalloc``, pytest's warning summary shows it, child processes
trace too, and the builtin tracer can no longer be started beside memtape's. Each scenario
runs in a child interpreter; the standard library under ``-X tracemalloc`` (or
``PYTHONTRACEMALLOC``) is the reference.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest
from child_python import describe, run_python
from source_lines import line_of

# The standard library's output under -X tracemalloc is the reference for each of these.
LEAK = """\
import warnings
warnings.simplefilter("always", ResourceWarning)


def leak():
    return open(__file__)  # @tm:open


f = leak()
del f  # @tm:del
"""

LEAK_TEST = """\
def test_leaks_a_file():
    f = open(__file__)  # @tm:open
    del f  # @tm:del
"""

# Reports what the standard library's tracemalloc answers here, in a spawned
# multiprocessing child and in a subprocess child.
CHILDREN = """\
import json, multiprocessing, subprocess, sys

PROBE = (
    "import json, tracemalloc, memtape._native as n; "
    "print(json.dumps([tracemalloc.is_tracing(), tracemalloc.get_traceback_limit(), "
    "tracemalloc.is_tracing is n.is_tracing]))"
)


def probe(queue):
    import tracemalloc, memtape._native as n

    queue.put([
        tracemalloc.is_tracing(),
        tracemalloc.get_traceback_limit(),
        tracemalloc.is_tracing is n.is_tracing,
    ])


if __name__ == "__main__":
    seen = {}
    for method in ("spawn", "forkserver"):
        ctx = multiprocessing.get_context(method)
        queue = ctx.Queue()
        child = ctx.Process(target=probe, args=(queue,))
        child.start()
        seen[method] = queue.get(timeout=60)
        child.join(60)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    seen["subprocess"] = json.loads(out.stdout)
    print(json.dumps(seen))
"""

ALLOCATED_AT = re.compile(r'File "(?P<file>[^"]+)", line(?:no)? (?P<line>\d+)')


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def allocation_site(output: str) -> tuple[str, int]:
    """The most recent frame of the first "Object allocated at" traceback in ``output``."""
    _, found, tail = output.partition("Object allocated at")
    assert found, f"no allocation traceback in:\n{output}"
    lines = tail.split("\n\n")[0]
    frames = ALLOCATED_AT.findall(lines)
    assert frames, f"an empty allocation traceback in:\n{output}"
    file, line = frames[-1]
    return file, int(line)


@pytest.fixture
def leak(tmp_path: Path) -> Path:
    return write(tmp_path, "leak.py", LEAK)


LAUNCHES: dict[str, tuple[list[str], dict[str, str]]] = {
    "env-var": ([], {"MEMTAPE_TRACEMALLOC": "5"}),
    "module-runner": (["-m", "memtape.tracemalloc", "--nframe", "5", "--top", "0"], {}),
}


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_a_leaked_file_warns_with_the_stdlib_allocation_traceback(
    memtape_name: str, leak: Path, launch: str
) -> None:
    reference = run_python(["-X", "tracemalloc=5", str(leak)])
    assert allocation_site(reference.stderr) == (str(leak), line_of(leak, "open"))
    prefix, env = LAUNCHES[launch]
    result = run_python([*prefix, str(leak)], env=env)
    assert result.returncode == reference.returncode == 0, describe(result)
    # The same warning and the same traceback, launcher frames (runpy, memtape) left out.
    assert result.stderr == reference.stderr


def test_dev_mode_warns_with_the_allocation_traceback(memtape_name: str, leak: Path) -> None:
    # -X dev shows ResourceWarnings and puts the debug hooks under memtape's allocator.
    reference = run_python(["-X", "dev", "-X", "tracemalloc=5", str(leak)])
    result = run_python(["-X", "dev", str(leak)], env={"MEMTAPE_TRACEMALLOC": "5"})
    assert result.returncode == 0, describe(result)
    assert "Enable tracemalloc" not in result.stderr
    assert allocation_site(result.stderr) == (str(leak), line_of(leak, "open"))
    assert result.stderr == reference.stderr


def run_pytest(directory: Path, env: Mapping[str, str]) -> str:
    write(directory, "pytest.ini", "[pytest]\n")
    result = run_python(
        ["-m", "pytest", "-p", "no:cacheprovider", "-W", "always::ResourceWarning", "-q"],
        env=env,
        cwd=directory,
        timeout=120,
    )
    assert result.returncode == 0, describe(result)
    return result.stdout


def test_pytest_warning_summary_names_the_line_that_opened_the_file(
    memtape_name: str, tmp_path: Path
) -> None:
    test_file = write(tmp_path, "test_leak.py", LEAK_TEST)
    output = run_pytest(tmp_path, {"MEMTAPE_TRACEMALLOC": "5"})
    assert "Enable tracemalloc" not in output, output
    assert allocation_site(output) == (str(test_file), line_of(test_file, "open"))


def test_stdlib_under_pytest_names_the_drop_before_3_14_and_the_open_after(
    tmp_path: Path,
) -> None:
    # The reference the test above improves on: pytest's warning record resurrects the
    # file and CPython 3.11 to 3.13 re-stamp the builtin tracer's trace there; from 3.14
    # the standard library names the line that opened it, as memtape does everywhere.
    test_file = write(tmp_path, "test_leak.py", LEAK_TEST)
    output = run_pytest(tmp_path, {"PYTHONTRACEMALLOC": "5"})
    line = "del" if sys.version_info < (3, 14) else "open"
    assert allocation_site(output) == (str(test_file), line_of(test_file, line))


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_children_inherit_the_tracer(memtape_name: str, tmp_path: Path, launch: str) -> None:
    script = write(tmp_path, "children.py", CHILDREN)
    prefix, env = LAUNCHES[launch]
    result = run_python([*prefix, str(script)], env=env, timeout=120)
    assert result.returncode == 0, describe(result)
    seen = json.loads(result.stdout)
    assert seen == {
        "spawn": [True, 5, True],
        "forkserver": [True, 5, True],
        "subprocess": [True, 5, True],
    }


def run_probe(tmp_path: Path, body: str, *args: str, env: Mapping[str, str]) -> object:
    script = write(tmp_path, "probe.py", textwrap.dedent(body))
    result = run_python([*args, str(script)], env=env)
    assert result.returncode == 0, describe(result)
    return json.loads(result.stdout.splitlines()[-1])


def test_the_stdlib_tracer_cannot_start_beside_memtape(memtape_name: str, tmp_path: Path) -> None:
    # -X tracemalloc=3 starts the builtin tracer before site runs: memtape stops it and
    # traces with MEMTAPE_TRACEMALLOC's limit; every start() afterwards is memtape's.
    body = """
        import json, tracemalloc, _tracemalloc
        import memtape.tracemalloc as mt
        from memtape import _process_tracer

        seen = [tracemalloc.get_traceback_limit(), _process_tracer.builtin_is_tracing()]
        tracemalloc.start(9)  # already tracing: the limit stays
        _tracemalloc.start(2)
        seen += [tracemalloc.get_traceback_limit(), _process_tracer.builtin_is_tracing()]
        tracemalloc.stop()
        seen.append(mt.is_tracing())
        tracemalloc.start(7)
        seen += [mt.is_tracing(), mt.get_traceback_limit(), _process_tracer.builtin_is_tracing()]
        print(json.dumps(seen))
    """
    seen = run_probe(tmp_path, body, "-X", "tracemalloc=3", env={"MEMTAPE_TRACEMALLOC": "5"})
    assert seen == [5, False, 5, False, False, True, 7, False]


def test_install_takes_over_an_imported_stdlib_module(memtape_name: str, tmp_path: Path) -> None:
    # Code that imported tracemalloc and _tracemalloc, and started the builtin tracer,
    # before opting in: the same module objects now answer with memtape's traces.
    body = """
        import json, os, tracemalloc, _tracemalloc as builtin
        tracemalloc.start(4)
        import memtape.tracemalloc as mt
        from memtape import _process_tracer

        mt.install()
        mt.install()
        data = bytearray(50_000)  # @tm:data
        tb = tracemalloc.get_object_traceback(data)
        snapshot = tracemalloc.take_snapshot()
        top = snapshot.statistics("lineno")[0]
        path = os.path.join(os.path.dirname(__file__), "snap.pickle")
        snapshot.dump(path)
        loaded = mt.Snapshot.load(path)
        print(json.dumps([
            mt.is_tracing(), mt.get_traceback_limit(), _process_tracer.builtin_is_tracing(),
            builtin.is_tracing is mt.is_tracing,
            [tb[-1].filename, tb[-1].lineno],
            type(snapshot) is tracemalloc.Snapshot, top.traceback[-1].lineno, top.size >= 50_000,
            len(loaded.traces) == len(snapshot.traces),
        ]))
    """
    seen = run_probe(tmp_path, body, env={})
    script = tmp_path / "probe.py"
    data_line = line_of(script, "data")
    assert seen == [True, 4, False, True, [str(script), data_line], True, data_line, True, True]


def test_install_before_tracemalloc_is_imported(memtape_name: str, tmp_path: Path) -> None:
    body = """
        import json, sys
        import memtape.tracemalloc as mt

        mt.install()
        mt.start(3)
        was_imported = "tracemalloc" in sys.modules
        import tracemalloc
        limit = tracemalloc.get_traceback_limit()
        print(json.dumps([was_imported, tracemalloc.is_tracing(), limit]))
    """
    assert run_probe(tmp_path, body, env={}) == [False, True, 3]


def test_the_exit_report_shows_the_programs_lines_only(tmp_path: Path) -> None:
    """``python -m memtape.tracemalloc --top N script.py``: what runpy and memtape did to
    load the script is not the program's (python loads a script in C, untraced): no site
    of the report is runpy's or memtape's, and the script's kept list comes first."""
    script = tmp_path / "keeps.py"
    script.write_text("kept = [bytearray(1000) for _ in range(2000)]  # @tm:kept\n")
    result = run_python(["-m", "memtape.tracemalloc", "--top", "30", str(script)])
    assert result.returncode == 0, describe(result)
    sites = [line for line in result.stderr.splitlines() if line.startswith("#")]
    assert sites, describe(result)
    assert sites[0].startswith(f"#1   {script}:{line_of(script, 'kept')}:"), sites
    package = str(Path(__file__).resolve().parent.parent / "python" / "memtape")
    assert not [s for s in sites if "runpy" in s or package in s], sites
