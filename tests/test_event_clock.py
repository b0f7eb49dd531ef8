"""Event times: wall-clock nanoseconds, in ring order, with the fast clock and without.

By default a tick of the event recorder is one ``rdtsc`` where the kernel keeps time with
the invariant time-stamp counter, converted to wall time when events are read (at a
conversion each recording fixes when it starts);
``MEMTAPE_EVENT_CLOCK=realtime`` makes every tick a ``CLOCK_REALTIME`` nanosecond. Both
must give the same answers: times inside the recording's wall-clock window, never going
back in event order, and a gap of 50 ms measured as 50 ms.
"""

from __future__ import annotations

import json

import pytest
from child_python import describe, run_python

SCRIPT = """
import json, time
import memtape

memtape.record_memory_events(True, 10_000, min_size=100_000)
start = time.time_ns()
first = bytearray(200_000)
before_sleep = time.time_ns()
time.sleep(0.05)
after_sleep = time.time_ns()
second = bytearray(300_000)
del first, second
while_recording = [e["timestamp_ns"] for e in memtape.get_memory_events()]
memtape.record_memory_events(False)
end = time.time_ns()
events = [(e["action"], e["size"], e["timestamp_ns"]) for e in memtape.get_memory_events()]
print(json.dumps({
    "start": start, "before_sleep": before_sleep, "after_sleep": after_sleep, "end": end,
    "events": events, "while_recording": while_recording,
}))
"""

# Ticks convert from an anchor read together from both clocks at the recording's start,
# at a rate measured over at least 5 ms: a millisecond is far above their error and far
# below the 50 ms measured.
TOLERANCE_NS = 1_000_000


@pytest.mark.parametrize("clock", ["default", "realtime"])
def test_event_times_are_wall_clock_and_ordered(clock: str) -> None:
    env = {"MEMTAPE_EVENT_CLOCK": clock} if clock == "realtime" else {}
    result = run_python(["-c", SCRIPT], env=env)
    assert result.returncode == 0, describe(result)
    r = json.loads(result.stdout)
    events = r["events"]
    assert [(a, s) for a, s, _ in events] == [
        ("alloc", 200_001),
        ("alloc", 300_001),
        ("free", 200_001),
        ("free", 300_001),
    ]
    times = [t for _, _, t in events]
    assert times == sorted(times)
    assert r["start"] - TOLERANCE_NS <= times[0] <= r["before_sleep"] + TOLERANCE_NS
    assert r["after_sleep"] - TOLERANCE_NS <= times[1] <= r["end"] + TOLERANCE_NS
    assert times[-1] <= r["end"] + TOLERANCE_NS
    gap = times[1] - times[0]
    assert r["after_sleep"] - r["before_sleep"] - TOLERANCE_NS <= gap
    assert gap <= r["end"] - r["start"] + TOLERANCE_NS
    # A recording's conversion is fixed when it starts: read while recording or after, an
    # event carries the same time.
    assert r["while_recording"] == times
