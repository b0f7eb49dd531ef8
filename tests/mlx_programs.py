"""MLX programs recorded by memtape, each run in a fresh interpreter (``python
mlx_programs.py NAME SNAPSHOT``) so that recording starts before ``mlx.core`` is imported
and MLX's own counters start from zero. Each prints one JSON line: the checks it made
(``checks``: label -> [our active, MLX active, our reserved, MLX active + cache]), the
MLX events (action, size, line of the innermost frame in this file, thread) and extras.

Lines are found by their ``# tag:NAME`` comments.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
from pathlib import Path
from typing import Any

import memtape

HERE = Path(__file__).resolve()
DEVICE = 0

checks: dict[str, list[int]] = {}
extras: dict[str, Any] = {}


def snapshot_totals(path: Path) -> tuple[int, int]:
    """(active, reserved) bytes of MLX's device in a snapshot memtape wrote."""
    with path.open("rb") as f:
        snap = pickle.load(f)
    active = reserved = 0
    for seg in snap["segments"]:
        if seg["device"] != DEVICE:
            continue
        reserved += seg["total_size"]
        active += sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    return active, reserved


def check(label: str, snapshot: Path) -> None:
    import mlx.core as mx

    memtape.dump_snapshot(snapshot)
    active, reserved = snapshot_totals(snapshot)
    mlx_active = mx.get_active_memory()
    checks[label] = [active, mlx_active, reserved, mlx_active + mx.get_cache_memory()]


def mlp(snapshot: Path) -> None:
    import mlx.core as mx
    import mlx.optimizers as optim
    from mlx import nn

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = nn.Linear(64, 256)
            self.l2 = nn.Linear(256, 10)

        def __call__(self, x: mx.array) -> mx.array:
            return self.l2(nn.relu(self.l1(x)))  # tag:forward

    model = MLP()
    opt = optim.SGD(learning_rate=0.1)

    def loss_fn(m: MLP, x: mx.array, y: mx.array) -> mx.array:
        return nn.losses.cross_entropy(m(x), y).mean()  # tag:loss

    step = nn.value_and_grad(model, loss_fn)
    x = mx.random.normal((128, 64))
    y = mx.random.randint(0, 10, (128,))
    steps: list[int] = []
    for i in range(4):
        steps.append(len(memtape.get_memory_events()))
        loss, grads = step(model, x, y)  # tag:step
        opt.update(model, grads)  # tag:update
        mx.eval(model.parameters(), opt.state, loss)  # tag:train_eval
        check(f"step{i}", snapshot)
    extras["steps"] = steps
    extras["before_clear"] = len(memtape.get_memory_events())
    mx.clear_cache()  # tag:clear
    check("cleared", snapshot)
    extras["before_limit"] = len(memtape.get_memory_events())
    mx.set_cache_limit(0)
    loss, grads = step(model, x, y)
    opt.update(model, grads)
    mx.eval(model.parameters(), opt.state, loss)
    check("limit0", snapshot)


def implicit(snapshot: Path) -> None:
    import mlx.core as mx
    import numpy as np

    a = mx.ones((200, 50))
    mx.eval(a)
    b = mx.exp(a)  # tag:make_item
    b.sum().item()  # tag:item
    c = mx.sin(a)  # tag:make_numpy
    np.array(c)  # tag:numpy
    d = mx.cos(a)  # tag:make_print
    print(d[0, :3])  # tag:print
    e = mx.tanh(a)  # tag:make_float
    float(e[3, 3])  # tag:float
    f = mx.sqrt(a)  # tag:make_async
    mx.async_eval(f)  # tag:async
    mx.eval(f)
    g = mx.abs(a)  # tag:make_bool
    if g[0, 0] > 1:  # tag:bool
        pass
    h = mx.sigmoid(a)  # tag:make_list
    h.tolist()  # tag:list
    check("end", snapshot)


def compiled(snapshot: Path) -> None:
    import mlx.core as mx

    @mx.compile
    def gelu_ish(x: mx.array) -> mx.array:
        return x * mx.sigmoid(1.702 * x) + mx.exp(-x * x)

    x = mx.random.normal((300, 300))
    for _ in range(3):
        y = gelu_ish(x)  # tag:compiled_call
        mx.eval(y)  # tag:compiled_eval
        check("compiled", snapshot)
    del y
    check("after", snapshot)


def threads(snapshot: Path) -> None:
    import mlx.core as mx

    # MLX streams belong to their thread unless made to be shared.
    shared = mx.new_thread_unsafe_stream(mx.cpu)
    made: list[mx.array] = []

    def create() -> None:
        with mx.stream(shared):
            a = mx.ones((300, 300))
            made.append(mx.exp(a) + a)  # tag:thread_make

    t = threading.Thread(target=create)
    t.start()
    t.join()

    def evaluate() -> None:
        mx.eval(made[0])  # tag:thread_eval
        extras["eval_thread"] = threading.get_native_id()

    t = threading.Thread(target=evaluate)
    t.start()
    t.join()
    check("threads", snapshot)


def stop_restores(snapshot: Path) -> None:
    import mlx.core as mx

    original = mx.clear_cache
    memtape.record_memory_events(True, sources=("framework",))
    extras["attached"] = list(memtape._native._mlx_status())
    extras["wrapped"] = mx.clear_cache is not original
    a = mx.ones((100, 100)) + 1
    mx.eval(a)
    memtape.record_memory_events(False)
    extras["detached"] = list(memtape._native._mlx_status())
    extras["restored"] = mx.clear_cache is original
    n = len(memtape.get_memory_events())
    b = mx.ones((100, 100)) * 3
    mx.eval(b)
    del a
    extras["events_after_stop"] = len(memtape.get_memory_events()) - n
    extras["still_works"] = float(b.sum().item())


def unknown_version(snapshot: Path) -> None:
    import warnings

    import mlx.core as mx

    mx.__version__ = "0.0.1"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memtape.record_memory_events(True)
        memtape.record_memory_events(True)
        a = mx.ones((100, 100)) + 1
        mx.eval(a)
        keep = [bytearray(1000) for _ in range(10)]
        memtape.record_memory_events(False)
    events = memtape.get_memory_events()
    extras["warnings"] = [str(w.message) for w in caught if w.category is RuntimeWarning]
    extras["mlx_events"] = sum(1 for e in events if e["device"] == DEVICE)
    extras["python_events"] = sum(1 for e in events if e["device"] == -1)
    del keep


def native_once(snapshot: Path) -> None:
    import mlx.core as mx

    memtape.record_memory_events(True, 1_000_000, sources=("python", "framework", "native"))
    mx.set_cache_limit(0)
    a = mx.ones((1000, 1000)) * 2  # tag:native_make
    mx.eval(a)
    del a
    events = memtape.get_memory_events()
    memtape.record_memory_events(False)
    # MLX's std::malloc asks for the buffer plus an 8-byte size header.
    extras["native_sizes"] = sorted(
        {e["size"] for e in events if e["device"] == -2 and e["size"] >= 1_000_000}
    )
    extras["mlx_sizes"] = sorted(
        {e["size"] for e in events if e["device"] == DEVICE and e["size"] >= 1_000_000}
    )
    extras["native_events"] = sum(1 for e in events if e["device"] == -2)


def forks(snapshot: Path) -> None:
    import os

    import mlx.core as mx

    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            mx.eval(mx.exp(mx.ones((64, 64))) + 1.0)

    worker = threading.Thread(target=busy)
    worker.start()
    children = 0
    for _ in range(30):
        pid = os.fork()
        if pid == 0:
            keep = [bytearray(100) for _ in range(100)]
            os._exit(0 if keep else 1)
        _, status = os.waitpid(pid, 0)
        children += os.waitstatus_to_exitcode(status) == 0
    stop.set()
    worker.join()
    extras["children_ok"] = children
    check("forks", snapshot)


def foreign(snapshot: Path) -> None:
    """A C++ library (``MEMTAPE_MLX_SHIM``, loaded before the recording starts) calls
    MLX's foreign-memory API: the array constructor that wraps caller memory (libmlx's
    only caller of ``make_buffer``), ``make_buffer`` and ``release`` themselves."""
    import ctypes
    import os

    import mlx.core as mx

    shim = ctypes.PyDLL(os.environ["MEMTAPE_MLX_SHIM"])
    shim.shim_allocator.restype = ctypes.c_void_p
    shim.shim_wrap.restype = ctypes.c_float
    shim.shim_wrap.argtypes = [ctypes.c_void_p, ctypes.c_int]
    shim.shim_make_buffer.restype = ctypes.c_void_p
    shim.shim_make_buffer.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    shim.shim_release.argtypes = [ctypes.c_void_p]
    data = (ctypes.c_float * 1000)(*range(1000))
    address = ctypes.addressof(data)
    real = shim.shim_allocator()
    memtape.record_memory_events(True, 1_000_000, sources=("framework",))
    extras["forwarded"] = shim.shim_allocator() != real
    extras["last"] = shim.shim_wrap(address, 1000)  # tag:foreign_wrap
    extras["deleted"] = shim.shim_deleted()
    extras["made"] = shim.shim_make_buffer(address, 4000)
    shim.shim_release(address)
    check("wrapped", snapshot)
    shim.shim_drop()
    mx.eval(mx.ones((10, 10)) + 1)
    check("dropped", snapshot)
    memtape.record_memory_events(False)
    extras["restored"] = shim.shim_allocator() == real


PROGRAMS = {
    "mlp": mlp,
    "implicit": implicit,
    "compiled": compiled,
    "threads": threads,
    "stop_restores": stop_restores,
    "unknown_version": unknown_version,
    "native_once": native_once,
    "forks": forks,
    "foreign": foreign,
}
#: Programs that start the recording themselves (with mlx already imported).
SELF_STARTING = ("stop_restores", "unknown_version", "native_once", "foreign")


def main() -> None:
    name, snapshot = sys.argv[1], Path(sys.argv[2])
    if name in SELF_STARTING:
        import mlx.core  # noqa: F401 - imported before the recording starts
    else:
        memtape.record_memory_events(True, 1_000_000, sources=("framework",))
    PROGRAMS[name](snapshot)
    if name not in SELF_STARTING:
        memtape.dump_snapshot(snapshot)
    memtape.record_memory_events(False)
    events = [
        {
            "action": e["action"],
            "size": e["size"],
            "line": next(
                (f[2] for f in reversed(e["frames"]) if Path(f[0]).resolve() == HERE), None
            ),
            "thread": e["thread"],
            "op": e["op"],
        }
        for e in memtape.get_memory_events()
        if e["device"] == DEVICE
    ]
    print(json.dumps({"checks": checks, "events": events, "extras": extras}))


if __name__ == "__main__":
    main()
