"""Memory over time in one line of text: one character per sample, its height the
sample's share of the highest one shown."""

from __future__ import annotations

from collections.abc import Sequence

#: Eighths of a cell, from empty to full (block elements).
BLOCKS = " ▁▂▃▄▅▆▇█"
#: The same steps where the terminal cannot show block elements.
ASCII_STEPS = " .:-=+*#@"


def sparkline(samples: Sequence[int], width: int, *, steps: str = BLOCKS) -> str:
    """The last ``width`` samples as ``width`` characters (padded on the left while
    there are fewer), scaled to the highest of them; a sample above zero shows at least
    the lowest step."""
    shown = list(samples[-width:]) if width > 0 else []
    top = max(shown, default=0)
    levels = len(steps) - 1
    line = []
    for value in shown:
        if top <= 0 or value <= 0:
            line.append(steps[0])
            continue
        level = max(1, round(value * levels / top))
        line.append(steps[level])
    return " " * (max(width, 0) - len(shown)) + "".join(line)
