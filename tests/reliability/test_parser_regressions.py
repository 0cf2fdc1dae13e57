"""One test per parser bug the corpus and the fuzzer found: each used to escape as another
exception (an "internal error", exit 3) or to name no place; now a located TraceFormatError.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from pipeline.errors import TraceFormatError
from pipeline.ingest.detect import detect
from pipeline.ingest.flight_recorder import parse as flight_recorder
from pipeline.ingest.gz import gunzip
from pipeline.ingest.kineto import parse as kineto
from pipeline.ingest.nsys import parse as nsys
from pipeline.synth.nsys import Layout, write_export
from tests.reliability.corpus import kineto_doc, nsys_json_lines


def test_pickle_frame_longer_than_memory(tmp_path: Path) -> None:
    """Was OverflowError from the unpickler (found by the fuzzer)."""
    path = tmp_path / "rank0.pkl"
    path.write_bytes(b"\x80\x04\x95" + b"\x00" * 7 + b"\x80")
    with pytest.raises(TraceFormatError, match=r"rank0.pkl: byte \d+: corrupt or truncated pickle"):
        flight_recorder.parse(path)


@pytest.mark.parametrize(
    ("ts", "event"),
    [("1e30", 1), ("99999999999999999999", 1), ('"110"', 1), ("-4e15", 1)],
)
def test_kineto_time_out_of_range_or_not_a_number(tmp_path: Path, ts: str, event: int) -> None:
    """Was a polars cast error (float form) or a null start_ns caught by conform (int form)."""
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(kineto_doc(0)).replace('"ts": 110,', f'"ts": {ts},'))
    with pytest.raises(TraceFormatError, match=rf"\$\.traceEvents\[{event}\]\.ts: "):
        kineto.parse(path)


def test_kineto_huge_duration_and_base_time(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(kineto_doc(0)).replace('"dur": 20,', '"dur": 1e17,'))
    with pytest.raises(TraceFormatError, match=r"\$\.traceEvents\[1\]\.dur: "):
        kineto.parse(path)
    doc = kineto_doc(0)
    doc["baseTimeNanoseconds"] = 2**62
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"\$\.baseTimeNanoseconds: "):
        kineto.parse(path)


def test_kineto_negative_time_is_kept(tmp_path: Path) -> None:
    doc = kineto_doc(0)
    doc["traceEvents"][1]["ts"] = -110
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    ops = kineto.parse(path).tables["ops"]
    assert min(ops.column("start_ns").to_pylist()) == doc["baseTimeNanoseconds"] - 110_000


def test_kineto_non_utf8_names_the_byte(tmp_path: Path) -> None:
    """msgspec says only "Invalid UTF-8": the offset now comes from the bytes."""
    raw = json.dumps(kineto_doc(0)).encode()
    path = tmp_path / "rank0.json"
    path.write_bytes(raw.replace(b"aten::mm", b"aten::\xff\xfe"))
    at = raw.index(b"aten::mm") + len(b"aten::")
    with pytest.raises(TraceFormatError, match=rf": byte {at}: malformed JSON"):
        kineto.parse(path)


def test_nsys_json_integer_beyond_int64(tmp_path: Path) -> None:
    """Was a polars overflow when the frame was built, after every line was read."""
    lines = nsys_json_lines()
    lines[3]["NvtxEvent"]["Timestamp"] = str(2**64)
    path = tmp_path / "report.json"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    with pytest.raises(TraceFormatError, match=r"report.json:4: .*outside 64-bit integers"):
        nsys.parse(path)


def test_nsys_sqlite_text_in_an_integer_column(tmp_path: Path) -> None:
    """Was a polars ComputeError; SQLite keeps text in an INTEGER column as text."""
    path = write_export(tmp_path / "rank0.sqlite", layout=Layout(steps=1, layers=1))
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'soon' WHERE rowid = 2")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="CUPTI_ACTIVITY_KIND_RUNTIME: a value does not"):
        nsys.parse(path)


def test_nsys_sqlite_non_utf8_string_stays_text(tmp_path: Path) -> None:
    """Was sqlite3.OperationalError ("Could not decode to UTF-8"), refusing the whole file."""
    path = write_export(tmp_path / "rank0.sqlite", layout=Layout(steps=1, layers=1))
    con = sqlite3.connect(path)
    # the GEMM kernels' name: "gemm" and a byte that is no UTF-8 (0xff)
    changed = con.execute(
        "UPDATE StringIds SET value = CAST(X'67656d6dff' AS TEXT) WHERE id IN "
        "(SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL) AND value LIKE 'sm90_xmma_gemm%' "
        "RETURNING id"
    ).fetchall()
    con.commit()
    con.close()
    kernels = nsys.parse(path).tables["kernels"]
    # the byte read as U+FFFD, the name still a GEMM; the NCCL kernel untouched
    assert [(k["name"], k["kind"]) for k in kernels.select(["name", "kind"]).to_pylist()] == [
        ("gemm\ufffd", "gemm")
    ] * 3 + [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm")]
    assert len(changed) == 1  # (one string names the three GEMM kernels)


def test_truncated_sqlite_is_claimed_and_located(tmp_path: Path) -> None:
    """A cut-off export was skipped as "not a trace" (its schema beyond the cut)."""
    full = write_export(tmp_path / "full.sqlite", layout=Layout(steps=1, layers=1))
    cut = tmp_path / "rank0.sqlite"
    cut.write_bytes(full.read_bytes()[:5000])
    assert detect(cut) == "nsys"
    with pytest.raises(TraceFormatError, match=r"rank0.sqlite: byte 5000: truncated SQLite"):
        nsys.parse(cut)


def test_small_cut_gzip_is_located_at_detection(tmp_path: Path) -> None:
    """A cut-off small .gz used to decompress to a partial head and pass as "not a trace"."""
    path = tmp_path / "rank0.flight_recorder.json.gz"
    path.write_bytes(gzip.compress(b'{"version": "2.10", "entries": []}' * 50)[:30])
    with pytest.raises(TraceFormatError, match=r": byte 30: truncated gzip data"):
        detect(path)


def test_gunzip_places() -> None:
    data = gzip.compress(b"x" * 10_000 + b"y" * 10_000)
    assert (
        gunzip("f", data + gzip.compress(b"z") + b"\0" * 8) == b"x" * 10_000 + b"y" * 10_000 + b"z"
    )
    broken = bytearray(data)
    broken[-8] ^= 1  # the CRC; its last byte is where zlib notices
    with pytest.raises(TraceFormatError, match=rf"f: byte {len(data) - 5}: broken gzip data"):
        gunzip("f", bytes(broken))
    with pytest.raises(TraceFormatError, match=r"f: byte 20: truncated gzip data"):
        gunzip("f", data[:20])
    with pytest.raises(TraceFormatError, match=rf"f: byte {len(data)}: .*not a gzip member"):
        gunzip("f", data + b"junk")
