"""os.fork() in a traced process: the child traces on its own, the parent carries on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from child_python import describe, run_scenario

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")

FORK = """
tm.start(10)
parent_obj = bytearray(1000)  # @tm:fork-parent
pid = os.fork()
if pid == 0:
    code = 1
    try:
        assert tm.is_tracing(), "child is not tracing"
        assert tm.get_traceback_limit() == 10
        child_obj = bytearray(2000)  # @tm:fork-child
        tb = tm.get_object_traceback(child_obj)
        assert tb is not None, "child allocation not traced"
        assert (tb[-1].filename, tb[-1].lineno) == (__file__, line_of("fork-child")), tb
        inherited = tm.get_object_traceback(parent_obj)
        assert inherited is not None, "traces from before the fork were lost in the child"
        assert inherited[-1].lineno == line_of("fork-parent"), inherited
        lines = {s.traceback[0].lineno for s in tm.take_snapshot().statistics("lineno")
                 if s.traceback[0].filename == __file__}
        assert line_of("fork-child") in lines, lines
        tm.stop()
        assert not tm.is_tracing()
        assert tm.get_traced_memory() == (0, 0)
        code = 0
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)

code = wait_child(pid, 30)
assert code == 0, "child exited with %s" % code
assert tm.is_tracing()
after = bytearray(3000)  # @tm:fork-after
tb = tm.get_object_traceback(after)
assert tb is not None and tb[-1].lineno == line_of("fork-after"), tb
assert tm.get_object_traceback(parent_obj)[-1].lineno == line_of("fork-parent")
lines = {s.traceback[0].lineno for s in tm.take_snapshot().statistics("lineno")}
assert {line_of("fork-parent"), line_of("fork-after")} <= lines, lines
assert line_of("fork-child") not in lines, "the child's allocation shows in the parent"
tm.stop()
print("ok")
"""

# Threads that allocate until told to stop, while the main thread forks.
CHURN = """
import threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads

tm.start(5)
stop_churn = threading.Event()

def churn():
    while not stop_churn.is_set():
        junk = [bytearray(64) for _ in range(100)]
        junk.append({"k": list(range(10))})
        del junk
"""

FORK_WHILE_ALLOCATING = CHURN + """
threads = [threading.Thread(target=churn) for _ in range(2)]
for t in threads:
    t.start()
for round in range(int(ARGS[0])):
    time.sleep(0.001)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            obj = bytearray(5000)  # @tm:fork-thread-child
            tb = tm.get_object_traceback(obj)
            assert tb is not None and tb[-1].lineno == line_of("fork-thread-child"), tb
            tm.take_snapshot().statistics("lineno")
            tm.clear_traces()
            tm.stop()
            tm.start(3)
            assert tm.get_object_traceback(bytearray(10)) is not None
            tm.stop()
            code = 0
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    code = wait_child(pid, 20)
    assert code == 0, "child %d exited with %s" % (round, code)

stop_churn.set()
for t in threads:
    t.join(timeout=30)
    assert not t.is_alive()
tm.take_snapshot().statistics("lineno")
tm.stop()
print("ok")
"""


FORK_THEN_THREADS = CHURN + """
def child_thread(out):
    out.append(bytearray(7000))  # @tm:fork-child-thread

threads = [threading.Thread(target=churn) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(0.01)
pid = os.fork()
if pid == 0:
    code = 1
    try:
        # The parent's threads are gone; new ones may be given their stacks and
        # thread pointers, by which the hooks find a thread's state.
        out = []
        wanted = int(ARGS[0])
        for _ in range(wanted):
            t = threading.Thread(target=child_thread, args=(out,))
            t.start()
            t.join(20)
            assert not t.is_alive(), "a child thread hung"
        # A thread that died before allocating would leave fewer blocks to check.
        assert len(out) == wanted, "%d of %d child threads allocated" % (len(out), wanted)
        for obj in out:
            tb = tm.get_object_traceback(obj)
            assert tb is not None, "a child thread's block is not traced"
            assert tb[-1].lineno == line_of("fork-child-thread"), tb
            assert tb[0].filename.endswith("threading.py"), tb
        tm.stop()
        code = 0
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)
code = wait_child(pid, 30)
stop_churn.set()
for t in threads:
    t.join(timeout=30)
assert code == 0, "child exited with %s" % code
tm.stop()
print("ok")
"""


def test_fork_child_traces_and_parent_continues(tm_name: str, tmp_path: Path) -> None:
    result = run_scenario(tmp_path, tm_name, FORK, timeout=60)
    assert result.returncode == 0, describe(result)
    assert result.stdout == "ok\n", describe(result)


def test_fork_while_another_thread_allocates(tm_name: str, tmp_path: Path) -> None:
    result = run_scenario(tmp_path, tm_name, FORK_WHILE_ALLOCATING, "20", timeout=60)
    assert result.returncode == 0, describe(result)
    assert result.stdout == "ok\n", describe(result)


def test_threads_started_in_a_forked_child_are_traced(tm_name: str, tmp_path: Path) -> None:
    result = run_scenario(tmp_path, tm_name, FORK_THEN_THREADS, "40", timeout=60)
    assert result.returncode == 0, describe(result)
    assert result.stdout == "ok\n", describe(result)
    # A child thread's exception goes to stderr (threading's excepthook), not the code.
    assert result.stderr == "", describe(result)
