"""``--imports show|hide|fold``: how the reading commands show import machinery.

Import machinery is the frames Python runs between an ``import`` statement (or
``importlib.import_module``) and the imported module's first line: importlib's bootstrap,
zipimport, and the finders and loaders they call. ``hide`` (the default) removes them, so
what an import allocated is on the line that imported (or on the imported module's own
lines); ``fold`` ends each stack at its first import with one ``[import NAME]`` frame that
sums all that import did; ``show`` keeps every frame as recorded.
"""

from __future__ import annotations

import argparse

IMPORT_MODES = ("hide", "fold", "show")
DEFAULT_IMPORTS = "hide"


def add_imports_option(parser: argparse.ArgumentParser) -> None:
    """Adds ``--imports`` to a command's parser."""
    parser.add_argument(
        "--imports",
        choices=IMPORT_MODES,
        default=DEFAULT_IMPORTS,
        help="import machinery: hide it (default), fold each import into one [import NAME] "
        "frame, or show it",
    )
