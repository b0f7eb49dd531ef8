"""A small program with a memory problem, for trying memtape.

It parses a batch of fake log records into dicts, keeps an index of them that is never
trimmed (the "leak"), and builds a JSON report. Run it under memtape:

    python -m memtape.tracemalloc --nframe 5 examples/report_builder.py

and the top allocation sites point at `index_records` (the index that keeps growing) and
`parse_line` (the records it keeps alive).
"""

from __future__ import annotations

import json
import sys

_INDEX: dict[str, list[dict[str, object]]] = {}


def parse_line(line: str) -> dict[str, object]:
    day, user, action, size = line.split(",")
    return {"day": day, "user": user, "action": action, "bytes": int(size)}


def index_records(records: list[dict[str, object]]) -> None:
    for record in records:
        _INDEX.setdefault(str(record["user"]), []).append(record)  # never trimmed


def build_report(records: list[dict[str, object]]) -> str:
    totals: dict[str, int] = {}
    for record in records:
        key = str(record["action"])
        totals[key] = totals.get(key, 0) + int(str(record["bytes"]))
    return json.dumps({"records": len(records), "totals": totals})


def main(batches: int) -> None:
    for batch in range(batches):
        lines = [f"2026-11-{batch % 28 + 1:02d},user{i % 5000},op{i % 7},{i}" for i in range(20_000)]
        records = [parse_line(line) for line in lines]
        index_records(records)
        report = build_report(records)
    print(f"indexed {sum(len(v) for v in _INDEX.values())} records; last report: {report[:60]}...")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
