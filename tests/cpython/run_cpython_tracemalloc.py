#!/usr/bin/env python3
"""Run CPython's own ``Lib/test/test_tracemalloc.py`` against memtape.

Every CPython interpreter ships its tracemalloc test suite as
``test.test_tracemalloc``. This script runs that suite with memtape (or, to
check the harness, a proxy of the builtin tracer) in place of the C module
``_tracemalloc`` that ``Lib/tracemalloc.py`` is built on.

Mechanism
---------
* The interpreter under test is a venv from ``scripts/venv.sh X.Y`` (memtape
  installed in editable mode), or any interpreter given by path.
* For each run a throwaway venv is made from it in a temporary directory (no
  pip, no system site-packages); nothing is written into the developer's venvs.
  Its site-packages holds one ``.pth`` file that puts ``tests/cpython/startup``
  on ``sys.path`` and calls ``memtape_cpython_shim.install()``, which adds the
  site directories of the interpreter under test, stops the builtin tracer if
  the core started it, puts the backend in ``sys.modules['_tracemalloc']`` and
  emulates ``-X tracemalloc[=N]`` / ``PYTHONTRACEMALLOC=N`` startup tracing.
  ``site`` runs ``.pth`` files even under ``-I``/``-E``, and the tests start
  their child interpreters from ``sys.executable`` (the throwaway venv's
  python), so the children are substituted too.
* ``suite_driver.py`` runs the suite with unittest in that venv and logs one
  JSON line per test. A crash or hang fails the test that was running; the
  remaining tests then run in a fresh process.
* Tests listed in :data:`EXCLUDED` are not run; they are counted and printed
  with their reason. Any other skip counts as a failure.

Usage::

    python tests/cpython/run_cpython_tracemalloc.py --python 3.11
    python tests/cpython/run_cpython_tracemalloc.py --all
    python tests/cpython/run_cpython_tracemalloc.py --python 3.12 --backend proxy -v
    python tests/cpython/run_cpython_tracemalloc.py --python /path/to/python

Each interpreter ends with a line ``cpython-X.Y: N passed, N failed``
(preceded by ``N excluded`` and the reasons); several end with a
``total: N passed, N failed`` line. The exit status is 0 only when nothing
failed, errored, crashed, hung or was skipped without an exclusion.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STARTUP_DIR = HERE / "startup"
DRIVER = HERE / "suite_driver.py"
VENV_SCRIPT = REPO / "scripts" / "venv.sh"
ALL_VERSIONS = ("3.11", "3.12", "3.13", "3.14", "3.15")
BACKENDS = ("memtape", "proxy")

#: test id -> reason, excluded on every CPython version. None: the C API tests
#: (TestCAPI, which call PyTraceMalloc_Track/Untrack and _PyTraceMalloc_GetTraceback from
#: _testcapi/_testinternalcapi) run, as memtape answers that C API while it traces.
EXCLUDED: dict[str, str] = {}

#: test id -> reason, excluded on CPython 3.11 and 3.12 only
EXCLUDED_BEFORE_3_13: dict[str, str] = {
    "TestTracemallocEnabled.test_new_reference": (
        "relies on libpython calling its private _PyTraceMalloc_NewReference when a freelist "
        "object is reused, which only the builtin tracer receives (3.13 adds "
        "PyRefTracer_SetTracer, so it runs there)"
    ),
}

#: how a driver process that ran past its time limit is reported
HUNG = "hung"
#: outcomes that count as passed; every other one counts as failed
PASSING = frozenset({"passed", "expected_failure"})
#: seconds one driver process may run before the test it is running counts as hung
DEFAULT_TIMEOUT = 600


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter to test, as it describes itself."""

    executable: str
    version: tuple[int, int]
    full_version: str
    site_dirs: list[str]

    @property
    def label(self) -> str:
        return f"cpython-{self.version[0]}.{self.version[1]}"


@dataclass
class Outcome:
    """One test's result."""

    test_id: str
    outcome: str
    details: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.outcome in PASSING


@dataclass
class Report:
    """The results of one interpreter."""

    label: str
    outcomes: list[Outcome] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    setup_error: str | None = None

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def failed(self) -> int:
        return sum(not o.passed for o in self.outcomes) + (self.setup_error is not None)


class SetupError(Exception):
    """The interpreter or its throwaway venv could not be prepared."""


# --- finding the interpreter --------------------------------------------------------------


def exclusions_for(version: tuple[int, int]) -> dict[str, str]:
    """The exclusion table that applies to CPython *version*."""
    table = dict(EXCLUDED)
    if version < (3, 13):
        table.update(EXCLUDED_BEFORE_3_13)
    return table


def clean_env() -> dict[str, str]:
    """The environment for every interpreter we start: no ``PYTHON*`` variables.

    ``MEMTAPE_TRACEMALLOC`` goes too: memtape's own start-up hook would start tracing.
    """
    dropped = ("VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "MEMTAPE_TRACEMALLOC")
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTHON") and key not in dropped
    }


def base_interpreter(version: str) -> str:
    """The newest pyenv CPython X.Y (or ``pythonX.Y`` on PATH), as scripts/venv.sh finds it."""
    pyenv = shutil.which("pyenv")
    if pyenv:
        listing = subprocess.run(
            [pyenv, "versions", "--bare"], capture_output=True, text=True, check=False
        ).stdout.split()
        pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
        patches = [(int(m.group(1)), v) for v in listing if (m := pattern.match(v))]
        if patches:
            root = subprocess.run(
                [pyenv, "root"], capture_output=True, text=True, check=True
            ).stdout.strip()
            return str(Path(root) / "versions" / max(patches)[1] / "bin" / "python")
    found = shutil.which(f"python{version}")
    if found:
        return found
    raise SetupError(f"no CPython {version} found (pyenv or python{version} on PATH)")


def memtape_interpreter(version: str, build: bool) -> str:
    """The python of ``.venv-X.Y``: made and rebuilt by scripts/venv.sh unless *build* is off."""
    venv_python = REPO / f".venv-{version}" / "bin" / "python"
    if not build:
        if not venv_python.exists():
            raise SetupError(f"{venv_python} does not exist; run scripts/venv.sh {version}")
        return str(venv_python)
    print(f"building memtape for {version}: scripts/venv.sh {version}", flush=True)
    done = subprocess.run(
        ["bash", str(VENV_SCRIPT), version], stdout=subprocess.PIPE, text=True, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SetupError(f"scripts/venv.sh {version} failed with status {done.returncode}")
    return lines[-1].strip()


def resolve(spec: str, backend: str, build: bool) -> str:
    """The executable for ``--python`` *spec*: a version ``X.Y`` or a path."""
    if re.fullmatch(r"3\.\d+", spec):
        return memtape_interpreter(spec, build) if backend == "memtape" else base_interpreter(spec)
    path = shutil.which(spec) or spec
    if not Path(path).exists():
        raise SetupError(f"no interpreter at {spec}")
    return path


def describe(executable: str) -> Interpreter:
    """Ask *executable* for its version and site directories."""
    code = (
        "import json, platform, site, sys; print(json.dumps({"
        "'version': sys.version_info[:2], 'full': platform.python_version(), "
        "'impl': sys.implementation.name, 'site': site.getsitepackages()}))"
    )
    done = subprocess.run(
        [executable, "-c", code], capture_output=True, text=True, env=clean_env(), check=False
    )
    if done.returncode != 0:
        raise SetupError(f"{executable} does not run:\n{done.stderr}")
    info = json.loads(done.stdout)
    if info["impl"] != "cpython":
        raise SetupError(f"{executable} is {info['impl']}, not CPython")
    return Interpreter(executable, tuple(info["version"]), info["full"], info["site"])


# --- the throwaway venv ---------------------------------------------------------------------


def make_test_venv(target: Interpreter, backend: str, directory: Path) -> str:
    """Create the substituting venv in *directory*; return its python."""
    venv = directory / "venv"
    done = subprocess.run(
        [target.executable, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    if done.returncode != 0:
        raise SetupError(f"cannot create a venv with {target.executable}:\n{done.stderr}")
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=True,
        ).stdout.strip()
    )
    install = (
        f"import memtape_cpython_shim; "
        f"memtape_cpython_shim.install({backend!r}, {target.site_dirs!r})"
    )
    (site_packages / "zz_memtape_cpython_shim.pth").write_text(
        f"{STARTUP_DIR}\n{install}\n", encoding="utf-8"
    )
    return str(python)


def preflight(python: str, backend: str) -> None:
    """Check that an isolated child of *python* (``-I``, as the tests use) is substituted."""
    code = (
        "import json, sys, tracemalloc, memtape_cpython_shim as shim; "
        "m = sys.modules['_tracemalloc']; "
        "print(json.dumps([shim.installed_backend(), getattr(m.__spec__, 'origin', None), "
        "tracemalloc.start is m.start, tracemalloc.is_tracing()]))"
    )
    done = subprocess.run(
        [python, "-I", "-c", code], capture_output=True, text=True, env=clean_env(), check=False
    )
    try:
        installed, origin, bound, tracing = json.loads(done.stdout)
        substituted = installed == backend and origin != "built-in" and bound and not tracing
    except ValueError:
        substituted = False
    if done.returncode != 0 or not substituted:
        raise SetupError(
            f"the {backend} backend is not substituted in an isolated child "
            f"(status {done.returncode}):\n{done.stdout}{done.stderr}"
        )


# --- running the suite ----------------------------------------------------------------------


def list_tests(target: Interpreter) -> list[str]:
    """The test ids of the interpreter's own test module, loaded without substitution."""
    done = subprocess.run(
        [target.executable, "-I", str(DRIVER), "list"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    if done.returncode != 0:
        raise SetupError(f"cannot list test.test_tracemalloc:\n{done.stderr}")
    return list(json.loads(done.stdout))


def read_events(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def outcome_of(event: dict[str, object]) -> Outcome:
    """The Outcome a driver ``stop`` event reports."""
    details = event.get("details")
    return Outcome(
        str(event["id"]),
        str(event["outcome"]),
        [str(detail) for detail in details] if isinstance(details, list) else [],
    )


def run_driver(
    python: str, backend: str, ids: list[str], workdir: Path, timeout: float
) -> tuple[list[dict[str, object]], str, str | None]:
    """Run *ids* in one driver process: its events, its output and why it ended early."""
    events_path = workdir / "events.jsonl"
    log_path = workdir / "driver.log"
    events_path.unlink(missing_ok=True)
    command = [
        python,
        "-X",
        "faulthandler",
        str(DRIVER),
        "run",
        "--backend",
        backend,
        "--events",
        str(events_path),
        *ids,
    ]
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=workdir,
            start_new_session=True,
        )
        try:
            status = process.wait(timeout=timeout)
            abnormal = None if status == 0 else f"driver exited with status {status}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            abnormal = f"{HUNG}: killed after {timeout:g} s"
    output = log_path.read_text(encoding="utf-8", errors="replace")
    return read_events(events_path), output, abnormal


def run_suite(
    python: str, backend: str, ids: list[str], workdir: Path, *, timeout: float, verbose: bool
) -> list[Outcome]:
    """Run *ids*, restarting after a crash or hang with the tests not yet run."""
    outcomes: dict[str, Outcome] = {}
    extra: list[Outcome] = []
    pending = list(ids)
    while pending:
        events, output, abnormal = run_driver(python, backend, pending, workdir, timeout)
        if verbose:
            print(output, end="" if output.endswith("\n") else "\n", flush=True)
        started: list[str] = []
        for event in events:
            if event["event"] == "start":
                started.append(str(event["id"]))
            elif event["event"] == "stop":
                outcome = outcome_of(event)
                if outcome.test_id in ids:
                    outcomes[outcome.test_id] = outcome
                else:  # a setUpClass/setUpModule error, reported under its own id
                    extra.append(outcome)
        done = any(event["event"] == "done" for event in events)
        tail = "\n".join(output.splitlines()[-40:])
        if done:
            if abnormal is not None:  # every test ran, then the interpreter failed to exit
                extra.append(Outcome("<interpreter exit>", "crashed", [f"{abnormal}:\n{tail}"]))
            break
        reason = abnormal or "driver ended without finishing"
        verdict = HUNG if reason.startswith(HUNG) else "crashed"
        running = [test_id for test_id in started if test_id not in outcomes]
        for test_id in running:
            outcomes[test_id] = Outcome(test_id, verdict, [f"{reason}; output tail:\n{tail}"])
        if not started:
            # nothing ran at all: restarting would fail the same way
            for test_id in pending:
                outcomes[test_id] = Outcome(test_id, "not_run", [f"{reason}; output:\n{tail}"])
            break
        pending = [test_id for test_id in pending if test_id not in outcomes]
    for test_id in ids:
        outcomes.setdefault(test_id, Outcome(test_id, "not_run", ["the driver never ran it"]))
    return [outcomes[test_id] for test_id in ids] + extra


def run_interpreter(
    spec: str,
    *,
    backend: str,
    build: bool,
    timeout: float,
    verbose: bool,
    keep: bool,
    use_exclusions: bool,
) -> Report:
    """Run the suite for one ``--python`` value and return its report."""
    report = Report(label=f"cpython-{spec}" if re.fullmatch(r"3\.\d+", spec) else "cpython")
    workdir = Path(tempfile.mkdtemp(prefix="memtape-cpython-"))
    try:
        target = describe(resolve(spec, backend, build))
        report.label = target.label
        print(
            f"== {target.label} ({target.full_version}, {target.executable}), backend {backend}",
            flush=True,
        )
        python = make_test_venv(target, backend, workdir)
        preflight(python, backend)
        all_ids = list_tests(target)
        table = exclusions_for(target.version) if use_exclusions else {}
        report.excluded = {i: r for i, r in table.items() if i in all_ids}
        for stale in sorted(set(table) - set(all_ids)):
            print(f"warning: excluded test {stale} does not exist in {target.label}")
        ids = [test_id for test_id in all_ids if test_id not in report.excluded]
        report.outcomes = run_suite(python, backend, ids, workdir, timeout=timeout, verbose=verbose)
    except SetupError as exc:
        report.setup_error = str(exc)
    finally:
        if keep:
            print(f"kept the throwaway venv and logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


# --- reporting ------------------------------------------------------------------------------


def print_report(report: Report) -> None:
    """Failure details, per-test outcomes that did not pass, exclusions, closing line."""
    if report.setup_error:
        print(f"{report.label}: setup failed: {report.setup_error}")
    for outcome in report.outcomes:
        if outcome.passed:
            continue
        print(f"---- {outcome.outcome.upper()}: {outcome.test_id}")
        for detail in outcome.details:
            print(detail.rstrip())
    failing = [o for o in report.outcomes if not o.passed]
    if failing:
        print(f"{report.label}: not passed:")
        for outcome in failing:
            print(f"  {outcome.outcome:<18} {outcome.test_id}")
    print(f"{len(report.excluded)} excluded")
    for test_id, reason in report.excluded.items():
        print(f"  excluded {test_id}: {reason}")
    print(f"{report.label}: {report.passed} passed, {report.failed} failed", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run CPython's own test_tracemalloc against memtape's _tracemalloc.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--python",
        action="append",
        metavar="X.Y|PATH",
        help="a CPython version (uses .venv-X.Y) or an interpreter path; may be repeated",
    )
    target.add_argument(
        "--all", action="store_true", help=f"run {', '.join(ALL_VERSIONS)} in sequence"
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="memtape",
        help="memtape._tracemalloc, or a proxy of the builtin tracer that "
        "checks the harness itself (default: memtape)",
    )
    parser.add_argument(
        "--no-build",
        dest="build",
        action="store_false",
        help="use the existing .venv-X.Y instead of running scripts/venv.sh",
    )
    parser.add_argument(
        "--no-exclusions",
        dest="exclusions",
        action="store_false",
        help="run the excluded tests too",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds one driver process may run (default {DEFAULT_TIMEOUT})",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print the full unittest output"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the throwaway venv and the driver logs"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    specs = list(ALL_VERSIONS) if args.all else args.python
    reports = []
    for spec in specs:
        report = run_interpreter(
            spec,
            backend=args.backend,
            build=args.build,
            timeout=args.timeout,
            verbose=args.verbose,
            keep=args.keep,
            use_exclusions=args.exclusions,
        )
        print_report(report)
        reports.append(report)
    if len(reports) > 1:
        print(f"{sum(len(r.excluded) for r in reports)} excluded")
        print(
            f"total: {sum(r.passed for r in reports)} passed, "
            f"{sum(r.failed for r in reports)} failed"
        )
    return 1 if any(r.failed or not r.outcomes for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
