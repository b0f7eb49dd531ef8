"""MLX's buffers in what ``memtape run`` and the pytest plugin report: a source of their
own (``mlx``, beside ``python``, ``native`` and ``framework``) in every report, each
buffer on the line that created its array."""

from __future__ import annotations

from pathlib import Path

from child_python import describe
from memtape_cli import memtape, ok, read_json, record, write_program
from test_pytest_plugin import outcome, pytest_run

MLX_PROGRAM = """
import mlx.core as mx
a = mx.random.normal((500, 500))
b = mx.exp(a) @ a
mx.eval(b)  # 1,000,000 bytes live at the end
del a
"""


def test_every_report_shows_mlx_as_a_source_of_its_own(tmp_path: Path) -> None:
    script = write_program(tmp_path / "mlx_run.py", MLX_PROGRAM)
    capture = tmp_path / "mlx.mtape"
    record(script, capture)
    data = read_json("stats", capture)
    for at, least in (("peak", 2_000_000), ("end", 1_000_000)):
        split = data[at]["by_source"]
        assert set(split) == {"python", "native", "framework", "mlx"}, split
        assert split["mlx"] >= least, split
        # No NumPy here: framework keeps meaning framework allocators, without MLX.
        assert split["framework"] == 0, split
        assert sum(split.values()) == data[at]["bytes"]
    stats = ok(memtape("stats", capture)).stdout
    assert "mlx_run.py:4 in <module>" in stats
    assert "by source:" in stats and ", mlx " in stats
    assert "By source: python" in ok(memtape("top", capture)).stdout
    top = read_json("top", capture)
    assert top["by_source"]["mlx"] >= 2_000_000 and top["by_source"]["framework"] == 0
    assert "mlx 0 B" in ok(memtape("diff", capture, capture)).stdout
    assert read_json("diff", capture, capture)["by_source_diff"]["mlx"] == 0
    flame = tmp_path / "flame.html"
    ok(memtape("flamegraph", capture, "-o", flame))
    assert ", mlx " in flame.read_text(encoding="utf-8")
    page = tmp_path / "report.html"
    ok(memtape("report", capture, "-o", page))
    assert 'data-source="mlx"' in page.read_text(encoding="utf-8")


MLX_TESTS = """
import mlx.core as mx
import pytest

@pytest.mark.limit_memory("1 MB")
def test_mlx_over():
    big = mx.random.normal((1000, 1000))  # @big
    mx.eval(big)

@pytest.mark.limit_memory("2 MB")
def test_mlx_under():
    small = mx.random.normal((100, 100))
    mx.eval(small)
"""


def test_limit_memory_sees_mlx_buffers(tmp_path: Path) -> None:
    result = pytest_run(tmp_path, MLX_TESTS, "-v")
    assert result.returncode == 1, describe(result)
    assert outcome(result, "test_mlx_over") == "FAILED"
    assert outcome(result, "test_mlx_under") == "PASSED"
    # The file starts with MLX_TESTS' first (empty) line.
    line = MLX_TESTS.splitlines().index("    big = mx.random.normal((1000, 1000))  # @big") + 1
    # The 4 MB buffer, allocated inside eval, is named on the line that created it.
    assert "Test was limited to 1.0 MiB but its peak was 3.8 MiB" in result.stdout
    assert f"test_mlx_over at {tmp_path / 'test_generated.py'}:{line}" in result.stdout
