"""Kineto ingest vs a plain ``json.load`` of the same files, on real and generated traces.

Inputs: every real Kineto trace under ``../shared/real_traces`` (when present) and a
generated 8-rank job of at least 500 MB of JSON, made by repeating the events of the real
A100 trace (or, without real traces, of the bundled sample) with shifted times. Each side runs
in its own child process, so peak RSS is that side's alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.measure import measure, report

REPO = Path(__file__).resolve().parents[1]
JSON_LOAD = """
import gzip, json, sys
for p in sys.argv[1:]:
    data = open(p, 'rb').read()
    if data[:2] == b'\\x1f\\x8b':
        data = gzip.decompress(data)
    json.loads(data)
"""
# Real traces come from unrelated jobs (several claim rank 0), so each file is its own job;
# the generated job is one job, as a user would ingest it.
INGEST = """
import sys
from pathlib import Path
from pipeline.ingest.run import ingest
dataset, mode, paths = Path(sys.argv[1]), sys.argv[2], [Path(p) for p in sys.argv[3:]]
if mode == 'one-job':
    errors = ingest(paths, dataset, job='bench', jobs=1).errors
else:
    errors = [e for i, p in enumerate(paths)
              for e in ingest([p], dataset, job=f'f{i}', jobs=1).errors]
for e in errors:
    print(e.error, file=sys.stderr)
sys.exit(1 if errors else 0)
"""


def json_mb(paths: list[Path]) -> float:
    """Uncompressed JSON size of ``paths`` in MB (10^6 bytes)."""
    total = 0
    for p in paths:
        data = p.read_bytes()
        total += len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)
    return total / 1e6


def generate_job(seed_trace: Path, out: Path, *, ranks: int, target_mb: float) -> list[Path]:
    """Write ``ranks`` traces totalling about ``target_mb`` MB by repeating a real trace."""
    out.mkdir(parents=True, exist_ok=True)
    doc = json.loads(
        gzip.decompress(seed_trace.read_bytes())
        if seed_trace.suffix == ".gz"
        else seed_trace.read_bytes()
    )
    events = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(
        e.get("ts", 0) for e in events if "ts" in e
    )
    one = len(json.dumps(events)) / 1e6
    copies = max(1, round(target_mb / ranks / one))
    paths = []
    for r in range(ranks):
        path = out / f"rank{r}.pt.trace.json"
        with open(path, "w") as f:
            head = {k: v for k, v in doc.items() if k != "traceEvents"}
            head["distributedInfo"] = dict(
                head.get("distributedInfo") or {}, rank=r, world_size=ranks
            )
            f.write(json.dumps(head)[:-1] + ', "traceEvents": [')
            for c in range(copies):
                shifted = [
                    dict(e, ts=round(e["ts"] + c * span, 3)) if "ts" in e else e for e in events
                ]
                f.write(("," if c else "") + json.dumps(shifted)[1:-1])
            f.write("]}")
        paths.append(path)
    return paths


def real_inputs() -> list[Path]:
    """Every real Kineto trace, when ../shared/real_traces is there."""
    root = REPO.parent / "shared" / "real_traces"
    if not root.is_dir():
        return []
    return sorted((root / "kineto").rglob("*.json.gz")) + sorted(
        (root / "kineto_cpu_gloo").rglob("*.pt.trace.json.gz")
    )


def run_case(title: str, paths: list[Path], work: Path, mode: str) -> str:
    """Measure json.load and tokenwire ingest on ``paths`` (``mode``: one-job or per-file)."""
    mb = json_mb(paths)
    base = measure("json.load", JSON_LOAD, *map(str, paths))
    dataset = work / f"ds-{title.replace(' ', '_')}"
    shutil.rmtree(dataset, ignore_errors=True)
    ours = measure("tokenwire ingest (1 worker)", INGEST, str(dataset), mode, *map(str, paths))
    return report(title, mb, base, ours)


def main() -> None:
    """Run the Kineto benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generated-mb", type=float, default=520.0)
    parser.add_argument("--work", type=Path, default=REPO / "bench_out")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    real = real_inputs()
    if real:
        print(run_case("real Kineto traces", real, args.work, "per-file"), flush=True)
        seed = next(p for p in real if p.name.startswith("a100"))
    else:
        print("== real traces: ../shared/real_traces is absent, skipped", flush=True)
        seed = next((REPO / "sample_traces").rglob("*.json*"))
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        job = generate_job(seed, Path(tmp) / "job", ranks=8, target_mb=args.generated_mb)
        print(run_case("generated 8-rank job", job, args.work, "one-job"), flush=True)


if __name__ == "__main__":
    main()
