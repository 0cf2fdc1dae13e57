"""Big Kineto traces made from a recorded run: each rank's profiled steps repeated, as text.

    python -m benchmarks.big_kineto OUT [--run tests/data/cpu_gloo/fsdp4] [--file-mb 88]

Every rank file of the run (``rank*.pt.trace.json.gz``) is written to ``OUT`` as plain JSON
of about ``--file-mb`` MB: its header as recorded, then its events repeated ``copies`` times.
Copy ``k`` moves every ``ts`` on by ``k`` periods (a whole number of microseconds longer than
the recorded window of every rank, the same on all of them, so that the ranks stay aligned),
every id (``External id``, ``Ev Idx``, ``Record function id``, ``Sequence number``,
``Python id``, ``Python parent id``, flow ``id``, ``correlation``) by ``k`` times one more than
the largest the run holds, and ``ProfilerStep#N`` by ``k`` times the steps recorded. The
numbers are rewritten in the JSON text (the digits after a time's point are kept as they
are), so every copy's times are exact. The profiler's metadata and its own span are written
once. Deterministic: the same run gives the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

import orjson

from benchmarks.measure import REPO

RUN = REPO / "tests" / "data" / "cpu_gloo" / "fsdp4"
_IDS = (
    "External id",
    "Ev Idx",
    "Record function id",
    "Sequence number",
    "Python id",
    "Python parent id",
    "correlation",
    "id",
)
_NUMBER = re.compile(
    rb'"(ts|' + "|".join(re.escape(k) for k in _IDS).encode() + rb')":(-?\d+)'
    rb'|"ProfilerStep#(\d+)"'
)


def _once(event: dict) -> bool:
    """Metadata, instants and the profiler's own span: written once, not repeated."""
    return event.get("ph") in ("M", "i", "I") or event.get("cat") == "Trace"


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _extent(traces: list[dict]) -> tuple[int, dict[str, int], int]:
    """(period in us, id shift per key, steps per copy) common to every rank of the run."""
    lo, hi, steps = float("inf"), float("-inf"), set()
    top = dict.fromkeys(_IDS, 0)
    for trace in traces:
        for e in trace["traceEvents"]:
            if _once(e) or "ts" not in e:
                continue
            lo, hi = min(lo, e["ts"]), max(hi, e["ts"] + e.get("dur", 0))
            for key, value in (e.get("args") or {}).items():
                if key in top and isinstance(value, int):
                    top[key] = max(top[key], value)
            if isinstance(e.get("id"), int):
                top["id"] = max(top["id"], e["id"])
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                steps.add(int(e["name"].split("#")[1]))
    period = int(hi - lo) + 1000
    return period, {k: v + 1 for k, v in top.items()}, (max(steps) - min(steps) + 1) if steps else 0


def _copy(text: bytes, k: int, period: int, shift: dict[str, int], steps: int) -> bytes:
    def moved(m: re.Match) -> bytes:
        if m.group(3) is not None:
            return b'"ProfilerStep#%d"' % (int(m.group(3)) + k * steps)
        key = m.group(1).decode()
        by = period if key == "ts" else shift[key]
        return b'"%s":%d' % (m.group(1), int(m.group(2)) + k * by)

    return _NUMBER.sub(moved, text) if k else text


def write_big_run(out: Path, run: Path = RUN, file_mb: float = 87.0) -> list[Path]:
    """The run's rank files, each repeated to about ``file_mb`` MB of JSON, under ``out``."""
    sources = sorted(run.glob("rank*.pt.trace.json*"))
    traces = [_load(p) for p in sources]
    period, shift, steps = _extent(traces)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, trace in zip(sources, traces, strict=True):
        events = trace["traceEvents"]
        once = b",".join(orjson.dumps(e) for e in events if _once(e))
        body = b",".join(orjson.dumps(e) for e in events if not _once(e))
        copies = max(1, round(file_mb * 1e6 / (len(body) + 1)))
        trace["traceEvents"] = []
        head, tail = orjson.dumps(trace).split(b'"traceEvents":[]')
        target = out / path.name.removesuffix(".gz")
        with open(target, "wb") as f:
            f.write(head + b'"traceEvents":[' + once)
            for k in range(copies):
                f.write(b"," + _copy(body, k, period, shift, steps))
            f.write(b"]" + tail)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--run", type=Path, default=RUN, help="a folder of recorded rank traces")
    parser.add_argument("--file-mb", type=float, default=87.0)
    args = parser.parse_args(argv)
    for path in write_big_run(args.out, args.run, args.file_mb):
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
