"""Memory over time in one line of text: the recording's time cut into as many columns
as there are characters, each showing the highest memory of its stretch of time as a
share of the highest one shown."""

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


def time_columns(points: Sequence[tuple[float, int]], width: int, end: float) -> list[int]:
    """``width`` columns over the time from 0 to ``end`` seconds, each the highest of the
    ``(seconds, bytes)`` points in its stretch; a column with none keeps the value before
    it (memory stays what it was until the next point), 0 before the first point."""
    if width <= 0:
        return []
    end = max(end, max((t for t, _ in points), default=0.0))
    columns: list[int | None] = [None] * width
    for t, value in points:
        i = min(width - 1, int(t * width / end)) if end > 0 else width - 1
        columns[i] = max(columns[i] or 0, value)
    filled: list[int] = []
    last = 0
    for column in columns:
        if column is not None:
            last = column
        filled.append(last)
    return filled
