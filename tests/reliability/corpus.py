"""Broken inputs made from good ones, at test time: the corpus of issue 7.

Good seeds come from two places: small inline traces of every format (so the tests mean
something in any checkout) and the real traces in ``../shared/real_traces`` when present.
From them this module makes the ways trace folders break on real clusters: files cut off at
10 points, bit flips inside gzip members, events with wrong types or missing keys, NaN /
negative / huge timestamps, duplicate ranks, two jobs in one folder, a 0-byte file, a line
too long to hold, bytes that are not UTF-8, a symlink loop and files that cannot be opened.

Each broken file is a :class:`Case`: where it is and what ``tokenwire ingest`` must say
about it (the place in the file, as a regex over the ``Error:`` line), or that it is
accepted. Run ``python -m tests.reliability.corpus OUT [REAL_TRACES]`` to write a corpus to
look at by hand.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.ingest.detect import detect
from pipeline.synth.nsys import Layout, write_export

#: Where an error line must point: a byte, a line, an entry, a JSON path or a rank.
BYTE = r": byte \d+: "
LINE = r":\d+: "


@dataclass(frozen=True)
class Case:
    """One broken (or merely odd) input file and what ingest must report about it.

    ``place`` is a regex the file's one ``Error:`` line must match after the path; None
    means the file must be ingested without error.
    """

    name: str
    path: Path
    place: str | None


# --------------------------------------------------------------------------- good seeds


def kineto_doc(rank: int = 0, *, events: int = 3) -> dict:
    """A small but complete Kineto trace: a step, ops, a kernel, an NCCL kernel with metadata."""
    evs = [
        _x("user_annotation", "ProfilerStep#1", 100, 500),
        _x("cpu_op", "aten::mm", 110, 20, args={"External id": 1, "Input Dims": [[4, 4], [4, 4]]}),
        _x("cuda_runtime", "cudaLaunchKernel", 115, 5, args={"correlation": 7}),
        _x(
            "kernel",
            "ampere_sgemm_64x32_sliced1x4_tn",
            200,
            30,
            tid=7,
            args={"device": 0, "stream": 7, "correlation": 7, "grid": [1, 1, 1]},
        ),
        _x("cpu_op", "c10d::allreduce_", 300, 10, args={"Input Dims": [[1024]]}),
        _x(
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            320,
            40,
            tid=20,
            args={
                "device": 0,
                "stream": 20,
                "Collective name": "allreduce",
                "In msg nelems": 1024,
                "Out msg nelems": 1024,
                "Group size": 2,
                "dtype": "Float",
                "Process Group Name": "0",
                "Process Group Description": "default_pg",
                "Process Group Ranks": "[0, 1]",
            },
        ),
    ]
    for i in range(events):
        evs.append(_x("cpu_op", f"aten::add_{i}", 400 + i, 1))
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": evs,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


def _x(cat: str, name: str, ts: float, dur: float, *, tid: int = 1, args: dict | None = None):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        ev["args"] = args
    return ev


def flight_recorder_doc(rank: int = 0, entries: int = 4) -> dict:
    """A 2.x flight recorder dump of ``entries`` all_reduces on the default group."""
    return {
        "version": "2.10",
        "rank": rank,
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {},
        "entries": [
            {
                "record_id": i,
                "pg_id": 0,
                "process_group": ["0", "default_pg"],
                "collective_seq_id": i + 1,
                "p2p_seq_id": 0,
                "op_id": i + 1,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": 1_700_000_000_000_000_000 + i * 1000,
                "duration_ms": 0.5,
                "input_sizes": [[1024]],
                "input_dtypes": ["Float"],
                "output_sizes": [[1024]],
                "output_dtypes": ["Float"],
                "state": "completed",
                "time_discovered_started_ns": 0,
                "time_discovered_completed_ns": 0,
                "retired": True,
                "timeout_ms": 600_000,
                "is_p2p": False,
            }
            for i in range(entries)
        ],
    }


def nsys_json_lines() -> list[dict]:
    """A small line-delimited ``nsys export --type json`` stream: strings, a process, NVTX."""
    strings = ["[Unknown]", "[Broken backtraces]", "demo", "ncclAllReduce", "LANG=C"]
    lines: list[dict] = [{"data": strings, "files": []}]
    lines.append(
        {
            "Type": 27,
            "CommEvent": {
                "Timestamp": "0",
                "GlobalPid": str(17 << 24),
                "Command": "demo",
                "Args": [],
                "EnvironId": 4,
            },
        }
    )
    for i in range(3):
        lines.append(
            {
                "Type": 59,
                "NvtxEvent": {
                    "Type": 59,
                    "Timestamp": str(1000 + 100 * i),
                    "EndTimestamp": str(1050 + 100 * i),
                    "Text": "ncclAllReduce",
                    "GlobalTid": str((17 << 24) | 17),
                    "DomainId": "0",
                },
            }
        )
    lines.append({"data": ["main"]})
    return lines


def _json_lines(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)


def write_inline_seeds(folder: Path) -> dict[str, list[Path]]:
    """Write one good small file per format (and layout) into ``folder``; by format name."""
    folder.mkdir(parents=True, exist_ok=True)
    kin = [folder / "rank0.pt.trace.json", folder / "rank1.pt.trace.json.gz"]
    kin[0].write_text(json.dumps(kineto_doc(0)))
    kin[1].write_bytes(gzip.compress(json.dumps(kineto_doc(1)).encode(), mtime=0))
    fr = [folder / "rank0.flight_recorder.json.gz"]
    fr[0].write_bytes(gzip.compress(json.dumps(flight_recorder_doc(0)).encode(), mtime=0))
    lay = Layout(steps=1, layers=1, gemms_per_layer=1)
    nsys = [write_export(folder / "rank0_report.sqlite", ranks=(0,), layout=lay)]
    nsys.append(folder / "rank6_report.json.gz")
    nsys[1].write_bytes(gzip.compress(_json_lines(nsys_json_lines()), mtime=0))
    return {"kineto": kin, "flight_recorder": fr, "nsys": nsys}


def real_seeds(real_traces: Path | None, max_bytes: int = 1 << 20) -> dict[str, list[Path]]:
    """The real trace files tokenwire reads, by detected format; at most ``max_bytes`` each
    (the fuzzer mutates them many times), all of them when ``max_bytes`` is None."""
    out: dict[str, list[Path]] = {}
    if real_traces is None:
        return out
    for path in sorted(real_traces.rglob("*")):
        if not path.is_file() or path.suffix == ".md":
            continue
        if max_bytes is not None and path.stat().st_size > max_bytes:
            continue
        fmt = detect(path)
        if fmt is not None:
            out.setdefault(fmt, []).append(path)
    return out


# --------------------------------------------------------------------------- mutations


def cut_points(size: int, n: int = 10) -> list[int]:
    """``n`` distinct cut points spread over (0, size)."""
    return sorted({max(1, size * k // (n + 1)) for k in range(1, n + 1)} - {size})


def flip_in_gzip(data: bytes, rng: random.Random, flips: int = 3) -> bytes:
    """Flip bits inside the deflate body of the first gzip member (not header or trailer)."""
    out = bytearray(data)
    lo, hi = 10, max(11, len(data) - 8)
    for _ in range(flips):
        out[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
    return bytes(out)


def _suffix(path: Path) -> str:
    return "".join(path.suffixes[-2:]) if path.name.endswith(".gz") else path.suffix


def truncations(seeds: list[Path], out: Path, n: int = 10) -> list[Case]:
    """Every seed cut at ``n`` points; each must be refused, naming a byte or a line.

    A cut whose bytes another cut already has (two gzip headers) is left out: ingest skips
    repeated content by its sha256 without reading it again.
    """
    cases = []
    seen: set[bytes] = set()
    out.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        data = seed.read_bytes()
        stem = seed.name[: -len(_suffix(seed))] if _suffix(seed) else seed.name
        for cut in cut_points(len(data), n):
            if data[:cut] in seen:
                continue
            seen.add(data[:cut])
            path = out / f"{i:02d}_{stem}.cut{cut}{_suffix(seed)}"
            path.write_bytes(data[:cut])
            cases.append(Case(f"{seed.name} cut at {cut}", path, f"({BYTE}|{LINE})"))
    return cases


def gzip_flips(seeds: list[Path], out: Path, per_file: int = 2, seed: int = 7) -> list[Case]:
    """Gzip seeds with bits flipped inside their deflate data."""
    rng = random.Random(seed)
    cases = []
    out.mkdir(parents=True, exist_ok=True)
    for i, src in enumerate(seeds):
        if not src.read_bytes().startswith(b"\x1f\x8b"):
            continue
        for k in range(per_file):
            path = out / f"{i:02d}_{src.name[: -len(_suffix(src))]}.flip{k}{_suffix(src)}"
            path.write_bytes(flip_in_gzip(src.read_bytes(), rng))
            cases.append(Case(f"{src.name} bits flipped #{k}", path, f"({BYTE}|{LINE})"))
    return cases


def content_cases(out: Path) -> list[Case]:
    """Wrong types, missing keys, odd timestamps, non-UTF-8, empty, per format.

    Files that must be accepted get ranks of their own (7, 8...) so they clash with nothing.
    """
    out.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def kineto(name: str, doc_or_bytes, place: str | None) -> None:
        path = out / f"{name}.pt.trace.json"
        if isinstance(doc_or_bytes, bytes):
            path.write_bytes(doc_or_bytes)
        else:
            path.write_text(json.dumps(doc_or_bytes))
        cases.append(Case(f"kineto {name}", path, place))

    doc = kineto_doc(2)
    doc["traceEvents"][1]["name"] = 5
    kineto("wrong_type_name", doc, re.escape("$.traceEvents[1].name"))
    doc = kineto_doc(7)
    doc["traceEvents"][3]["args"]["device"] = "zero"  # read as unknown, as Kineto's own tools do
    kineto("wrong_type_device_rank7", doc, None)
    doc = kineto_doc(2)
    del doc["traceEvents"]
    kineto("missing_trace_events", doc, "`traceEvents`")
    doc = kineto_doc(8)
    del doc["traceEvents"][1]["ts"]  # an event without a time is skipped with a warning
    kineto("missing_ts_rank8", doc, None)
    text = json.dumps(kineto_doc(2)).replace('"ts": 110,', '"ts": NaN,')
    kineto("nan_ts", text.encode(), BYTE)
    doc = kineto_doc(9)
    doc["traceEvents"][1]["ts"] = -110
    kineto("negative_ts_rank9", doc, None)
    text = json.dumps(kineto_doc(2)).replace('"ts": 110,', '"ts": 1e30,')
    kineto("huge_float_ts", text.encode(), re.escape("$.traceEvents[1].ts"))
    text = json.dumps(kineto_doc(2)).replace('"ts": 110,', '"ts": 99999999999999999999,')
    kineto("huge_int_ts", text.encode(), re.escape("$.traceEvents[1].ts"))
    raw = json.dumps(kineto_doc(2)).encode().replace(b"aten::mm", b"aten::\xff\xfe")
    kineto("not_utf8", raw, BYTE)

    def fr(name: str, doc, place: str | None) -> None:
        path = out / f"{name}.flight_recorder.json"
        path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
        cases.append(Case(f"flight recorder {name}", path, place))

    doc = flight_recorder_doc(2)
    doc["entries"][2]["collective_seq_id"] = "three"
    fr("wrong_type_seq", doc, "entry 2: ")
    doc = flight_recorder_doc(2)
    del doc["entries"][1]["profiling_name"]
    fr("missing_profiling_name", doc, "entry 1: ")
    text = json.dumps(flight_recorder_doc(2)).replace('"duration_ms": 0.5', '"duration_ms": NaN')
    fr("nan_duration", text.encode(), LINE)
    doc = flight_recorder_doc(2)
    doc["entries"][0]["time_created_ns"] = 2**70
    fr("huge_time", doc, "entry 0: ")
    doc = flight_recorder_doc(7)
    doc["entries"][0]["time_created_ns"] = -5
    fr("negative_time_rank7", doc, None)
    fr("not_utf8", json.dumps(flight_recorder_doc(2)).encode().replace(b"2.21.5", b"\xff"), LINE)

    def nsys_json(name: str, lines: list, place: str | None) -> None:
        path = out / f"{name}.nsys.json"
        path.write_bytes(b"".join(x if isinstance(x, bytes) else _json_lines([x]) for x in lines))
        cases.append(Case(f"nsys json {name}", path, place))

    lines = nsys_json_lines()
    lines[2]["NvtxEvent"]["Timestamp"] = "soon"
    nsys_json("wrong_type_ts", lines, ":3: ")
    lines = nsys_json_lines()
    lines[3]["NvtxEvent"]["Timestamp"] = "99999999999999999999999"
    nsys_json("huge_ts", lines, ":4: ")
    lines = nsys_json_lines()
    lines[2]["NvtxEvent"]["Timestamp"] = "NaN"
    nsys_json("nan_ts", lines, ":3: ")
    lines = nsys_json_lines()
    lines[3] = _json_lines([lines[3]]).replace(b"ncclAllReduce", b"nccl\xffAllReduce")
    nsys_json("not_utf8", lines, ":4: ")

    sql = out / "rank5_odd.sqlite"
    write_export(sql, ranks=(5,), layout=Layout(steps=1, layers=1, gemms_per_layer=1))
    con = sqlite3.connect(sql)
    con.execute("UPDATE StringIds SET value = CAST(X'6e63636cff' AS TEXT) WHERE id = 1")
    con.commit()
    con.close()
    cases.append(Case("nsys sqlite with a non-UTF-8 string", sql, None))
    bad = out / "rank2_text_times.sqlite"
    write_export(bad, ranks=(2,), layout=Layout(steps=1, layers=1, gemms_per_layer=1))
    con = sqlite3.connect(bad)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'NaN' WHERE rowid = 1")
    con.commit()
    con.close()
    cases.append(Case("nsys sqlite with a text timestamp", bad, "CUPTI_ACTIVITY_KIND_KERNEL"))

    empty = out / "rank3.pt.trace.json"
    empty.write_bytes(b"")
    cases.append(Case("0-byte file", empty, BYTE))
    return cases


def long_line(out: Path, size: int) -> Case:
    """An nsys json export whose first line has no end within ``size`` bytes (a sparse file
    when it is large, so that the test writes almost nothing)."""
    path = out / "long_line.nsys.json"
    head = b'{"data":["[Broken backtraces]","NvtxEvent","'
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # the rest reads as zero bytes, no newline anywhere
    return Case("a line without newline", path, ":1: line longer than")


def unreadable(out: Path) -> list[Case]:
    """A symlink loop, a broken symlink and a FIFO: files whose ``open`` fails or would block.

    ``chmod 000`` would be the obvious unreadable file, but the tests run as root, for whom
    permissions do not apply; these three fail for root too.
    """
    out.mkdir(parents=True, exist_ok=True)
    a, b = out / "loop_a.json", out / "loop_b.json"
    a.symlink_to(b.name)
    b.symlink_to(a.name)
    dangling = out / "rank4.pt.trace.json"
    dangling.symlink_to("gone/rank4.pt.trace.json")
    fifo = out / "rank5.pt.trace.json"
    os.mkfifo(fifo)
    loop = "cannot read file: Too many levels of symbolic links"
    return [
        Case("symlink loop a", a, loop),
        Case("symlink loop b", b, loop),
        Case("broken symlink", dangling, "cannot read file: .*broken symbolic link"),
        Case("FIFO", fifo, "not a regular file but a FIFO"),
    ]


def duplicate_rank(out: Path) -> tuple[Path, Case]:
    """Two Kineto files with rank 0 and different bytes: the second one is refused."""
    out.mkdir(parents=True, exist_ok=True)
    first, second = out / "a_rank0.pt.trace.json", out / "b_rank0.pt.trace.json"
    first.write_text(json.dumps(kineto_doc(0)))
    second.write_text(json.dumps(kineto_doc(0, events=5)))
    return first, Case("duplicate rank", second, r"rank 0 of job '[^']+' is already taken by")


def mixed_jobs(out: Path) -> tuple[list[Path], list[Case]]:
    """Ranks 0 and 1 of two jobs in one folder: the second job's files clash on rank."""
    out.mkdir(parents=True, exist_ok=True)
    job_a = [out / f"jobA_rank{r}.pt.trace.json" for r in (0, 1)]
    job_b = [out / f"jobB_rank{r}.pt.trace.json" for r in (0, 1)]
    for r, path in enumerate(job_a):
        path.write_text(json.dumps(kineto_doc(r)))
    for r, path in enumerate(job_b):
        path.write_text(json.dumps(kineto_doc(r, events=7)))
    place = r"rank \d of job '[^']+' is already taken by .*jobA_rank\d"
    return job_a, [Case(f"second job rank {r}", p, place) for r, p in enumerate(job_b)]


def main(argv: list[str]) -> None:
    """Write the corpus to ``argv[0]`` (from ``argv[1]``'s real traces when given)."""
    out = Path(argv[0])
    real = Path(argv[1]) if len(argv) > 1 else None
    seeds = write_inline_seeds(out / "good")
    cases = content_cases(out / "content") + unreadable(out / "unreadable")
    cases.append(long_line(out, 1 << 30))
    every_seed = [p for ps in seeds.values() for p in ps]
    every_real = [p for ps in real_seeds(real, max_bytes=None).values() for p in ps]
    cases += truncations(every_seed + every_real, out / "truncated")
    cases += gzip_flips(every_seed + every_real, out / "flipped")
    for case in cases:
        print(f"{case.path}\t{case.place or 'accepted'}\t{case.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
