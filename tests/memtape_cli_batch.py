"""Run many damaged copies of a capture through ``memtape.cli.main``, in one child process.

Started by the tests as ``python memtape_cli_batch.py JOB.json``, the job being:

    {"source": PATH, "scratch": PATH,
     "cases": [{"truncate": N} | {"write": [OFFSET, [BYTE, ...]]}, ...],
     "commands": [["stats", "{file}"], ...]}

For each case it writes the damaged copy to ``scratch``, then runs every command (``{file}``
replaced by ``scratch``) in this process, exactly as the ``memtape`` command would, and
prints one JSON line per run: ``{"case", "command", "code", "stdout", "stderr", "error"}``
(``code`` is the exit status; ``error`` is the traceback of any exception other than
SystemExit, which the real command would have printed). Lines are flushed one by one, so
if the process dies the caller sees which case killed it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any


def damaged(source: bytes, case: dict[str, Any]) -> bytes:
    if "truncate" in case:
        return source[: case["truncate"]]
    offset, values = case["write"]
    data = bytearray(source)
    data[offset : offset + len(values)] = bytes(values)
    return bytes(data)


def run_command(argv: list[str]) -> dict[str, Any]:
    from memtape.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: object = None
    error = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException:  # the contract under test: nothing else escapes
            error = traceback.format_exc()
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "error": error}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    with open(job["source"], "rb") as f:
        source = f.read()
    scratch = job["scratch"]
    for index, case in enumerate(job["cases"]):
        with open(scratch, "wb") as f:
            f.write(damaged(source, case))
        for command in job["commands"]:
            argv = [arg.replace("{file}", scratch) for arg in command]
            result = run_command(argv)
            result.update(case=index, command=command)
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
