"""What the live view shows now: which table of sites and how far it is scrolled; the
keys change it."""

from __future__ import annotations

import curses
import enum
from dataclasses import dataclass


class SiteView(enum.Enum):
    """The tables of sites the view switches between: ``(table, grouping, title)``."""

    LIVE = ("live", "lineno", "live now")
    ALLOCATED = ("allocated", "lineno", "allocated since start")
    BY_FILE = ("live", "filename", "live now, by file")

    @property
    def table(self) -> str:
        return self.value[0]

    @property
    def by(self) -> str:
        return self.value[1]

    @property
    def title(self) -> str:
        return self.value[2]


#: The key that picks each view, as the key line shows it.
VIEW_KEYS = {"l": SiteView.LIVE, "a": SiteView.ALLOCATED, "f": SiteView.BY_FILE}


class KeyAction(enum.Enum):
    """What a key asks of the view's loop."""

    REDRAW = "redraw"
    QUIT = "quit"
    NONE = "none"


@dataclass
class ViewState:
    """The view's state between refreshes."""

    view: SiteView = SiteView.LIVE
    #: Index of the first site shown.
    scroll: int = 0
    #: Sites in the current table at the last refresh.
    sites_count: int = 0
    #: Site rows that fit on the screen at the last draw.
    page: int = 10

    def scroll_by(self, rows: int) -> None:
        """Scrolls by ``rows`` (up when negative), within the table."""
        last = max(0, self.sites_count - self.page)
        self.scroll = min(max(0, self.scroll + rows), last)

    def key(self, key: int | str) -> KeyAction:
        """Takes one key (a character or a curses key code)."""
        if key in ("q", "Q"):
            return KeyAction.QUIT
        if isinstance(key, str) and key in VIEW_KEYS:
            view = VIEW_KEYS[key]
        elif key == "\t":
            views = list(SiteView)
            view = views[(views.index(self.view) + 1) % len(views)]
        else:
            moves = {
                curses.KEY_UP: -1,
                "k": -1,
                curses.KEY_DOWN: 1,
                "j": 1,
                curses.KEY_PPAGE: -self.page,
                curses.KEY_NPAGE: self.page,
                " ": self.page,
                curses.KEY_HOME: -self.sites_count,
                "g": -self.sites_count,
                curses.KEY_END: self.sites_count,
                "G": self.sites_count,
            }
            if key not in moves:
                return KeyAction.REDRAW if key == curses.KEY_RESIZE else KeyAction.NONE
            self.scroll_by(moves[key])
            return KeyAction.REDRAW
        if view is not self.view:
            self.view, self.scroll = view, 0
        return KeyAction.REDRAW
