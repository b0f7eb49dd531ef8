"""The pytest plugin's analysis of a capture alongside its recording
(``_native._analyze_alongside``): a capture that runs for long is read by memtape's
follower thread while it is written, a short one by the caller at the end, and both
answer exactly what ``analyze_capture(path, time_window=False)`` answers on the finished
file. A dropped analysis leaves the follower free for the next capture, and a forked
child follows its own captures.

Each program runs in a child that records in process and prints what it found as JSON.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from child_python import describe
from memtape_cli import python, write_program

PRELUDE = """
import json
import os
import sys
import threading
import time

from memtape import _native

folder = sys.argv[1]
keep = []


def allocate_for(seconds):
    '''Allocates and frees on known lines until ``seconds`` have passed (a long test).'''
    end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < end:
        block = [bytearray(64) for _ in range(200)]  # churn
        if rounds % 50 == 0:
            keep.append(bytearray(100_000))  # kept
        del block
        rounds += 1
    return rounds


def recorded(name, seconds, read=True):
    '''A capture of ``allocate_for(seconds)`` analysed alongside; with ``read``: whether
    the follower read it, and whether its answers are analyze_capture's.'''
    path = os.path.join(folder, name + ".mtape")
    _native._start_capture(path, "{}", 0, False)
    alongside = _native._analyze_alongside(path)
    allocate_for(seconds)
    _native._stop_capture()
    if not read:
        return {"followed": alongside.followed}
    followed = alongside.followed
    got = alongside.result()
    want = _native.analyze_capture(path, time_window=False)
    return {
        "followed": followed,
        "events": got.events,
        "same_summary": got.summary_json(50) == want.summary_json(50),
        "same_totals": got.totals == want.totals and got.peak == want.peak,
        "same_end": got.end_bytes == want.end_bytes,
        "same_sites": all(
            got.sites("traceback", at, 1000, None) == want.sites("traceback", at, 1000, None)
            for at in ("peak", "end")
        ),
        "complete": got.complete,
    }
"""


def run(tmp_path: Path, body: str) -> dict[str, Any]:
    script = write_program(tmp_path / "alongside.py", PRELUDE + textwrap.dedent(body))
    result = python(script, tmp_path)
    assert result.returncode == 0, describe(result)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def assert_same(found: dict[str, Any]) -> None:
    assert found["events"] > 1000, found
    for key in ("same_summary", "same_totals", "same_end", "same_sites", "complete"):
        assert found[key] is True, (key, found)


def test_a_long_capture_is_followed_and_a_short_one_read_at_the_end(tmp_path: Path) -> None:
    found = run(
        tmp_path,
        """
        print(json.dumps({
            "long": recorded("long", 1.0),
            "short": [recorded(f"short{i}", 0.0005) for i in range(5)],
            "long_again": recorded("long_again", 0.5),
        }))
        """,
    )
    assert found["long"]["followed"] is True, found
    assert found["long_again"]["followed"] is True, found
    assert_same(found["long"])
    assert_same(found["long_again"])
    # A short capture is the caller's to read (20 ms: on a loaded machine one of them may
    # be stalled past it and followed; not all five).
    assert not all(short["followed"] for short in found["short"]), found
    for short in found["short"]:
        assert short["same_summary"] and short["same_sites"] and short["same_totals"], found


def test_a_dropped_analysis_leaves_the_follower_free(tmp_path: Path) -> None:
    """An analysis dropped without its result (a stop that failed) ends the follower's
    reading: the next capture is followed and answered."""
    found = run(
        tmp_path,
        """
        dropped = recorded("dropped", 0.5, read=False)
        done = {}
        worker = threading.Thread(target=lambda: done.update(recorded("next", 0.5)))
        worker.start()
        worker.join(60)
        print(json.dumps({"dropped": dropped, "next": done, "hung": worker.is_alive()}))
        """,
    )
    assert found["hung"] is False, found
    assert found["dropped"]["followed"] is True, found
    assert found["next"]["followed"] is True, found
    assert_same(found["next"])


def test_a_forked_child_follows_its_own_captures(tmp_path: Path) -> None:
    """The parent's follower thread is not in a forked child: the child's long capture is
    followed by a thread of its own, and the parent's follower still serves the parent."""
    found = run(
        tmp_path,
        """
        before = recorded("parent_before", 0.5)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            child = recorded("child", 0.5)
            os.write(write, json.dumps(child).encode())
            os._exit(0)
        os.close(write)
        child = json.loads(os.read(read, 100_000).decode())
        status = os.waitpid(pid, 0)[1]
        after = recorded("parent_after", 0.5)
        print(json.dumps({"before": before, "child": child, "after": after, "status": status}))
        """,
    )
    assert found["status"] == 0, found
    for name in ("before", "child", "after"):
        assert found[name]["followed"] is True, (name, found)
        assert_same(found[name])
