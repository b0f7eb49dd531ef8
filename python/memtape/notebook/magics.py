"""``%%memtape`` and ``%memtape_top``."""

from __future__ import annotations

import _tracemalloc
import contextlib
import os
import sys
import tempfile
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from memtape import _native
from memtape.notebook import cell_recording
from memtape.notebook.cell_code import cell_file_names, compile_cell, run_cell_code
from memtape.notebook.cell_recording import CellCapture
from memtape.notebook.inline_report import frame_html
from memtape.notebook.options import CELL_USAGE, TOP_USAGE, cell_options, top_options

# Rows of the report's tables (`memtape report` on a --save'd capture shows more).
REPORT_SITES = 20


def _summary(cell: CellCapture) -> str:
    """The cell's label, then ``memtape stats``' lines."""
    lines = cell.capture.stats_text().rstrip("\n").splitlines()
    return "\n".join([f"memtape: {cell.label}", *lines])


def _raised_note(cell: CellCapture) -> str | None:
    if cell.raised is None:
        return None
    return (
        f"memtape: {cell.label} raised {type(cell.raised).__name__}; "
        "the capture covers the cell up to the exception"
    )


def _cannot_record() -> str | None:
    """Why no cell can be recorded now, or None."""
    if _tracemalloc.is_tracing():
        return (
            "the standard library's tracemalloc is tracing, and the Python heap would go "
            "unrecorded; call tracemalloc.stop() first (memtape.tracemalloc is fine)"
        )
    return None


def _show(shell: Any, cell: CellCapture, top: int) -> None:
    """The report inline, with the summary and top sites as its text form."""
    note = _raised_note(cell)
    top_sites = cell.capture.top_text("lineno", "peak", top)
    text = "\n".join(part for part in (note, _summary(cell), top_sites) if part is not None)
    page = cell.capture.html_report(REPORT_SITES)
    shell.display_pub.publish(
        data={"text/html": frame_html(page, note), "text/plain": text}, metadata={}
    )


@magics_class
class MemtapeMagics(Magics):
    """Records a cell's memory and shows where it went."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.last: CellCapture | None = None
        self.scratch = tempfile.TemporaryDirectory(prefix="memtape-cells-")

    @cell_magic
    def memtape(self, line: str, cell: str) -> object:
        """Runs the cell in this kernel while recording its memory, then shows the
        report inline: memory over time, the flame graph at the peak, the top sites and
        leaks. The cell's variables, output and result are what they would be without
        the magic; an exception it raises is raised as usual, after the report.
        """
        __tracebackhide__ = True  # IPython's tracebacks leave this frame out
        opts = cell_options(line)
        code = compile_cell(self.shell, cell)
        saved = bool(opts.save)
        if opts.save:
            path = os.path.abspath(os.path.expanduser(opts.save))
            if os.path.isdir(path):
                raise UsageError(f"--save: {opts.save} is a directory")
        else:
            path = os.path.join(self.scratch.name, f"cell-{code.number}.mtape")
        native = opts.native_heap
        meta = cell_recording.metadata(code.label, native, cell_file_names(self.shell))
        why_not = _cannot_record()
        raised: BaseException | None = None
        value: object = None
        events = 0
        token = _native._own_work_begin()
        try:
            if why_not is None:
                why_not = cell_recording.start(path, meta, native)
            if why_not is None:
                try:
                    value = run_cell_code(code, self.shell)
                except BaseException as exc:  # noqa: BLE001 - raised again below, after the report
                    raised = exc
                events = cell_recording.stop(raised)
        finally:
            _native._work_end(token)
        if why_not is not None:
            # The cell runs as it would without the magic (outside memtape's own work, so
            # that a memtape.tracemalloc trace of the user's still sees it).
            print(f"memtape: not recording {code.label}: {why_not}", file=sys.stderr)
            return run_cell_code(code, self.shell)
        self._forget_last(path)
        try:
            self.last = cell_recording.analyze(path, saved, code.label, events, raised)
        except (OSError, ValueError) as exc:  # the cell's own outcome stands
            print(f"memtape: cannot read the capture of {code.label}: {exc}", file=sys.stderr)
        else:
            _show(self.shell, self.last, opts.top)
        if raised is not None:
            raise raised
        return value

    @line_magic
    def memtape_top(self, line: str) -> None:
        """Prints the top allocation sites of the last ``%%memtape`` cell."""
        opts = top_options(line)
        if self.last is None:
            raise UsageError("no %%memtape cell has run yet in this kernel")
        print(_summary(self.last))
        print(self.last.capture.top_text(opts.by, opts.at, opts.limit))

    def _forget_last(self, replaced_by: str) -> None:
        """Removes the last cell's capture file unless it was saved (one unsaved capture
        is kept: the one ``%memtape_top`` and the report's "Capture file" name)."""
        last, self.last = self.last, None
        if last is not None and not last.saved and last.path != replaced_by:
            with contextlib.suppress(OSError):
                os.unlink(last.path)

    def close(self) -> None:
        """Removes the scratch directory (captures not kept with ``--save``)."""
        self.scratch.cleanup()


# `%%memtape?` and `%memtape_top?` show the options too.
MemtapeMagics.memtape.__doc__ = f"{MemtapeMagics.memtape.__doc__}\n{CELL_USAGE}"
MemtapeMagics.memtape_top.__doc__ = f"{MemtapeMagics.memtape_top.__doc__}\n{TOP_USAGE}"
