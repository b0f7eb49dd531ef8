"""Event times: wall-clock nanoseconds, in ring order, with the fast clock and without.

By default a tick of the event recorder is one ``rdtsc`` where the kernel keeps time with
the invariant time-stamp counter, converted to wall time when events are read (at a
conversion each recording fixes when it starts);
``MEMTAPE_EVENT_CLOCK=realtime`` makes every tick a ``CLOCK_REALTIME`` nanosecond. Both
must give the same answers: times inside the recording's wall-clock window, never going
back in event order, and a gap of 50 ms measured as 50 ms.

A thread's event may reuse the reading of one of its 15 events before it while the beat
of memtape's clock thread (``memtape-clock``, a millisecond) has not moved: the tests
below pause the program (asleep, and computing without allocating) and check that the
first events after the pause carry its end, also in a forked child (which has no clock
thread: every event reads), and that the clock thread lives only while events are
recorded.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from block_sizes import bytearray_buffer
from child_python import describe, run_python

SCRIPT = """
import json, time
import memtape

# Read before the recording starts: no event of this recording can have read the clock
# earlier, whatever the clock thread's beat did meanwhile.
start = time.time_ns()
memtape.record_memory_events(True, 10_000, min_size=100_000)
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
    first, second = bytearray_buffer(200_000), bytearray_buffer(300_000)
    assert [(a, s) for a, s, _ in events] == [
        ("alloc", first),
        ("alloc", second),
        ("free", first),
        ("free", second),
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


PAUSES = """
import hashlib, json, os, time
import memtape

def clock_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names.count("memtape-clock")

def hash_time(data):
    started = time.perf_counter_ns()
    hashlib.sha256(data).digest()
    return time.perf_counter_ns() - started

# The computing pause: hashing enough bytes to last at least COMPUTE_NS (many beats of the
# clock thread), grown until the fastest of three hashes does, so that it means the same
# on a fast CPU as on a slow or busy one.
COMPUTE_NS = 40_000_000
DATA = bytes(1 << 20)
while min(hash_time(DATA) for _ in range(3)) < COMPUTE_NS and len(DATA) < 1 << 31:
    DATA = bytes(2 * len(DATA))

def paused(pause, rounds=20):
    # Each round: a pause, then one large allocation (the event looked at). The small
    # allocations around it make the thread read the clock and keep readings.
    memtape.record_memory_events(True, 10_000, min_size=1_000_000)
    threads = clock_threads()
    spans = []
    for _ in range(rounds):
        junk = [str(i) for i in range(40)]
        before = time.time_ns()
        pause()
        after = time.time_ns()
        block = bytearray(2_000_000)
        end = time.time_ns()
        spans.append((before, after, end))
        del block, junk
    times = [e["timestamp_ns"] for e in memtape.get_memory_events() if e["action"] == "alloc"]
    memtape.record_memory_events(False)
    return {"spans": spans, "times": times, "threads": threads}

result = {}
result["sleep"] = paused(lambda: time.sleep(0.02))
# hashlib digests DATA without allocating, the GIL held: nothing on this thread reads
# the clock meanwhile.
result["compute"] = paused(lambda: hashlib.sha256(DATA).digest())
deadline = time.monotonic() + 5
while clock_threads() and time.monotonic() < deadline:
    time.sleep(0.01)
result["threads_after"] = clock_threads()
# Framework events read the counter every time: no clock thread for them alone.
memtape.record_memory_events(True, 100, sources=("framework",))
result["threads_framework_only"] = clock_threads()
result["data_bytes"] = len(DATA)
memtape.record_memory_events(False)
memtape.record_memory_events(True, 10_000, min_size=1_000_000)
pid = os.fork()
if pid == 0:
    at_fork = clock_threads()
    memtape.record_memory_events(False)
    child = paused(lambda: time.sleep(0.02))
    print(json.dumps({"child": child, "threads_at_fork": at_fork}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
memtape.record_memory_events(False)
print(json.dumps(result))
"""


def check_paused(r: dict[str, Any]) -> None:
    """The event after each pause carries the pause's end, not a reading from before it.

    Allowed early: half the pause as measured in that round (a reading kept from before
    the pause would be early by all of it); a beat or a clock thread late by a few
    milliseconds on a busy machine is far inside that, at any CPU speed, since the pauses
    last many beats. Allowed late: the conversion's error.
    """
    spans, times = r["spans"], r["times"]
    assert len(times) == len(spans)
    late = [
        (n, after - t, after - before)
        for n, ((before, after, end), t) in enumerate(zip(spans, times, strict=True))
        if not after - (after - before) // 2 <= t <= end + TOLERANCE_NS
    ]
    assert not late, f"events timed before their pause ended (round, ns early, pause ns): {late}"
    assert r["threads"] == 1, "one clock thread while recording"


def test_the_first_events_after_a_pause_carry_its_end() -> None:
    result = run_python(["-c", PAUSES])
    assert result.returncode == 0, describe(result)
    child, parent = (json.loads(line) for line in result.stdout.splitlines())
    # The calibrated computation did last many beats (the clock thread's period is 1 ms),
    # also in a round that ran faster than the calibration did.
    shortest = min(a - b for b, a, _ in parent["compute"]["spans"])
    assert shortest >= 10_000_000, (shortest, parent["data_bytes"])
    check_paused(parent["sleep"])
    check_paused(parent["compute"])
    assert parent["threads_after"] == 0, "the clock thread outlived the recording"
    assert parent["threads_framework_only"] == 0
    # A forked child has no clock thread (every event reads the counter) until it starts
    # a recording of its own.
    assert child["threads_at_fork"] == 0
    check_paused(child["child"])
