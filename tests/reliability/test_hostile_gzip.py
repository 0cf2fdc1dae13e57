"""Gzip bombs and damaged gzip: a few hundred kilobytes that inflate to gigabytes, for every
reader of gzip (Kineto, flight recorder, Nsight json), and a bit-flipped flight recorder dump
given to ``tokenwire hang``. Each is refused with one located line (exit 1) within the child's
memory and CPU limits, having inflated the data once; inputs stay unchanged.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path

import pytest

from pipeline.ingest.gz import MAX_RATIO, MIN_LIMIT_BYTES, inflated_limit
from tests.reliability.corpus import flight_recorder_doc, flip_in_gzip
from tests.reliability.hostile import digest, error_line, only_line, run_cli

#: Inflated size of the bombs: past the limit of their compressed size, with room.
BOMB_BYTES = 1 << 30
BOMB = r": byte \d+: gzip data inflates past 256 MiB"


def bomb(head: bytes, unit: bytes, tail: bytes = b"", size: int = BOMB_BYTES) -> bytes:
    """One gzip member: ``head``, ``unit`` repeated to ``size`` bytes, ``tail``; written a
    MiB at a time, so the test never holds the inflated data."""
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [member.compress(head)]
    block = unit * ((1 << 20) // len(unit))
    for _ in range(size // len(block)):
        out.append(member.compress(block))
    out.append(member.compress(tail))
    out.append(member.flush())
    return b"".join(out)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "traces"
    out.mkdir()
    return out


def _ingest_refuses(folder: Path, path: Path, place: str) -> str:
    before = digest(folder)
    result = run_cli("ingest", path, "-o", folder.parent / "ds")
    assert result.returncode == 1, result.stderr[-2000:]
    line = error_line(result, path, place)
    assert digest(folder) == before
    return line


def test_the_limit_leaves_real_ratios_alone() -> None:
    assert inflated_limit(10) == MIN_LIMIT_BYTES
    assert inflated_limit(1 << 30) == MAX_RATIO << 30  # a 1 GB .gz may hold 100 GB


def test_kineto_bomb_of_small_events(folder: Path) -> None:
    """Events of 4 KB each (mostly spaces, so the decoder is not what takes the time): the
    limit stops the stream, one pass, at 256 MiB of 1 GiB."""
    path = folder / "rank0.pt.trace.json.gz"
    path.write_bytes(bomb(b'{"traceEvents": [{}', b"," + b" " * 4093 + b"{}", b"]}"))
    assert path.stat().st_size * MAX_RATIO < MIN_LIMIT_BYTES < BOMB_BYTES
    _ingest_refuses(folder, path, BOMB)


def test_kineto_bomb_of_one_space_run(folder: Path) -> None:
    """A 255 KB member of spaces inside the event array inflated to 718 MB in 41 s: the
    reader copied and rescanned its whole buffer per read. Now: one event's worth."""
    path = folder / "rank0.pt.trace.json.gz"
    path.write_bytes(bomb(b'{"traceEvents": [', b" ", b"]}"))
    _ingest_refuses(folder, path, r": byte \d+: no end of an event within 67,108,864 bytes")


def test_kineto_bomb_before_the_events(folder: Path) -> None:
    """No ``traceEvents`` key until gigabytes in: the head is buffered, up to the limit."""
    path = folder / "rank0.pt.trace.json.gz"
    path.write_bytes(bomb(b'{"schemaVersion": 1, "pad": "', b"x", b'", "traceEvents": []}'))
    _ingest_refuses(folder, path, BOMB)


def test_flight_recorder_bomb(folder: Path) -> None:
    path = folder / "rank0.flight_recorder.json.gz"
    head = json.dumps(flight_recorder_doc(0))[:-1].encode() + b', "pad": "'
    path.write_bytes(bomb(head, b"x", b'"}'))
    before = digest(folder)
    result = run_cli("hang", path)
    assert result.returncode == 1, result.stderr[-2000:]
    only_line(result, path, BOMB)
    assert digest(folder) == before
    _ingest_refuses(folder, path, BOMB)


def test_nsys_json_bomb(folder: Path) -> None:
    path = folder / "rank0_report.json.gz"
    head = b'{"data":["[Broken backtraces]","NvtxEvent"]}\n'
    path.write_bytes(bomb(head, b'{"x":1}' + b" " * 8184 + b"\n"))
    _ingest_refuses(folder, path, BOMB)


@pytest.mark.parametrize("seed", range(4))
def test_hang_on_a_bit_flipped_dump(folder: Path, seed: int) -> None:
    """Was gzip's zlib.error escaping tokenwire hang's folder scan (exit 3)."""
    good = gzip.compress(json.dumps(flight_recorder_doc(0, entries=200)).encode(), mtime=0)
    path = folder / "rank0.flight_recorder.json.gz"
    path.write_bytes(flip_in_gzip(good, random.Random(seed), flips=8))
    before = digest(folder)
    for target in (folder, path):
        result = run_cli("hang", target)
        assert result.returncode == 1, result.stderr[-2000:]
        only_line(result, path, r"(: byte \d+: |:\d+: )")
    assert digest(folder) == before
