"""IPython and Jupyter: ``%load_ext memtape``, then ``%%memtape`` records a cell and shows
its report inline, and ``%memtape_top`` prints the top sites of the last one."""

from __future__ import annotations

from typing import Any

from memtape.notebook.magics import MemtapeMagics

__all__ = ["MemtapeMagics", "load_ipython_extension", "unload_ipython_extension"]

_loaded: dict[int, MemtapeMagics] = {}


def load_ipython_extension(ipython: Any) -> None:
    """Registers the magics with ``ipython`` (once)."""
    if id(ipython) in _loaded:
        return
    magics = MemtapeMagics(ipython)
    ipython.register_magics(magics)
    _loaded[id(ipython)] = magics


def unload_ipython_extension(ipython: Any) -> None:
    """Removes the magics and the captures not kept with ``--save``."""
    magics = _loaded.pop(id(ipython), None)
    if magics is None:
        return
    for kind in ("cell", "line"):
        for name in magics.magics[kind]:
            ipython.magics_manager.magics[kind].pop(name, None)
    magics.close()
