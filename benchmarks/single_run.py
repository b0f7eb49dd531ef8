"""One measurement in a fresh process: run.py starts this script once per (workload, config, run).

It loads the workload, starts the tracer, times the workload's main() with perf_counter,
stops the tracer, and writes one JSON object to --result. Tracer start-up and tear-down
(memray's compression at exit included) stay outside the timed window for every tracer.
Exit status: 0 measured, 3 tracer unavailable (the JSON says why), anything else failed.

    python single_run.py --workload workloads/alloc_heavy.py --config memtape25 --result r.json
    python single_run.py --probe --config memray --result r.json
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import tracers

EXIT_UNAVAILABLE = 3


def load_workload(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"workload_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"single_run.py: cannot load workload {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(
    workload: ModuleType, params: dict[str, Any], config: tracers.TracerConfig, scratch_dir: str
) -> dict[str, Any]:
    gc.collect()
    tracer = tracers.start(config, scratch_dir)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    workload.main(**params)
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    stats = tracer.stop()
    return {
        "status": "ok",
        "seconds": t1 - t0,
        "cpu_seconds": cpu1 - cpu0,
        # Linux reports ru_maxrss in KiB: the high-water mark of the whole process.
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        **stats,
    }


def probe(config: tracers.TracerConfig, scratch_dir: str) -> dict[str, Any]:
    version = tracers.version_of(config)
    tracers.start(config, scratch_dir).stop()
    return {"status": "ok", "version": version}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--result", required=True, type=Path)
    parser.add_argument("--workload", type=Path)
    parser.add_argument("--quick", action="store_true", help="use the workload's QUICK_PARAMS")
    parser.add_argument(
        "--probe", action="store_true", help="only import, start and stop the tracer"
    )
    parser.add_argument(
        "--scratch",
        default=tempfile.gettempdir(),
        help="folder for capture files (deleted after each run)",
    )
    args = parser.parse_args(argv)
    config = tracers.TracerConfig.parse(args.config)

    result: dict[str, Any]
    status = 0
    try:
        if args.probe:
            result = probe(config, args.scratch)
        else:
            if args.workload is None:
                parser.error("--workload is required unless --probe is given")
            workload = load_workload(args.workload)
            params = workload.QUICK_PARAMS if args.quick else workload.PARAMS
            result = measure(workload, params, config, args.scratch)
    except tracers.TracerUnavailable as exc:
        result = {"status": "unavailable", "reason": str(exc), "hint": exc.hint}
        status = EXIT_UNAVAILABLE
    args.result.write_text(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
