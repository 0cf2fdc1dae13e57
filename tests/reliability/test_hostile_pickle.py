"""Hostile flight recorder pickles: a few hundred bytes that expand to 2**60 values through the
memo, dict keys that hash forever or crash the interpreter, integers ``str`` refuses, and
sequence ids near 1e18. Each is refused (exit 1, one located line) within the child's memory
and CPU limits, by ``tokenwire hang`` and by ``tokenwire ingest``; inputs stay unchanged.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import pytest

from tests.reliability.corpus import flight_recorder_doc
from tests.reliability.hostile import digest, error_line, only_line, run_cli

LEVELS = 60  # 2**60 values once expanded: forever for anything that walks them unbounded


def _str(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _get(i: int) -> bytes:
    return b"j" + struct.pack("<I", i)  # LONG_BINGET


def _put(i: int) -> bytes:
    return b"r" + struct.pack("<I", i)  # LONG_BINPUT


def shared_levels(levels: int, empty: bytes, build: bytes) -> bytes:
    """Opcodes leaving nothing on the stack and memo[levels] = a container whose two items
    are memo[levels-1], down to memo[0] = an empty one: a DAG doubling per level."""
    out = empty + _put(0)
    for i in range(1, levels + 1):
        out += b"(" + _get(i - 1) + _get(i - 1) + build + _put(i) + b"0"  # MARK .. POP
    return out


def dump_with(field: str, levels: int = LEVELS) -> bytes:
    """A 2.x dump whose entry 0 has ``field`` = the shared-list DAG."""
    body = b"}(" + _str("version") + _str("2.10") + _str("rank") + b"K\x00"
    body += _str("entries") + b"(}(" + _str("profiling_name") + _str("nccl:all_reduce")
    body += _str(field) + _get(levels) + b"ul" + b"u."
    return b"\x80\x02" + shared_levels(levels, b"]", b"l") + body


def dump_keyed_by(key_opcodes: bytes, prelude: bytes = b"") -> bytes:
    """A dump dict whose one key is what ``key_opcodes`` push (after ``prelude``); a string
    pushed and popped first makes the file look like a dump to ingest's format detection."""
    sniffed = _str("profiling_name") + b"0"
    return b"\x80\x02" + sniffed + prelude + b"}" + key_opcodes + b"K\x01s."


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "dumps"
    out.mkdir()
    return out


def _check(folder: Path, path: Path, place: str, *, hang_only: bool = False) -> str:
    """Both commands refuse ``path`` with one line at ``place``; the folder is unchanged."""
    before = digest(folder)
    result = run_cli("hang", path)
    assert result.returncode == 1, result.stderr[-2000:]
    line = only_line(result, path, place)
    if not hang_only:
        result = run_cli("ingest", path, "-o", folder.parent / "ds")
        assert result.returncode == 1, result.stderr[-2000:]
        error_line(result, path, place)
    assert digest(folder) == before
    return line


@pytest.mark.parametrize("field", ["process_group", "input_sizes", "frames"])
def test_shared_list_dag_is_refused_by_count(folder: Path, field: str) -> None:
    """Was the whole DAG in the message (15 s and 0.8 GB at 50 levels, forever at 60)."""
    path = folder / "rank0.pkl"
    path.write_bytes(dump_with(field))
    assert path.stat().st_size < 2000
    line = _check(folder, path, r": entry 0: more than 1,000,000 values")
    assert "[[" not in line


def test_small_sharing_is_still_read(folder: Path) -> None:
    """The count is a budget, not a ban on sharing: Python's pickler writes a list used by
    every entry once and references it from the others."""
    path = folder / "rank0.pkl"
    doc = flight_recorder_doc(0, entries=50)
    shape = [[1024, 8]]
    for entry in doc["entries"]:
        entry["input_sizes"] = entry["output_sizes"] = shape
    path.write_bytes(pickle.dumps(doc, protocol=2))
    loaded = pickle.loads(path.read_bytes())["entries"]
    assert loaded[0]["input_sizes"] is loaded[49]["output_sizes"]  # one list, referenced
    result = run_cli("hang", path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""


def test_shared_tuple_as_dict_key_is_refused_before_hashing(folder: Path) -> None:
    """Hashing a key walks all of it: 2**60 steps inside the unpickler, before any check."""
    path = folder / "rank0.pkl"
    prelude = shared_levels(LEVELS, b")", b"t")
    path.write_bytes(dump_keyed_by(_get(LEVELS), prelude))
    _check(folder, path, r": byte \d+: pickle refused: .*dict key that is a tuple")


def test_deep_tuple_key_does_not_crash(folder: Path) -> None:
    """A million nested tuples as a key: hashing recursed in C until the stack overflowed
    (SIGSEGV, no error line at all)."""
    path = folder / "rank0.pkl"
    path.write_bytes(dump_keyed_by(b")" + b"\x85" * 1_000_000))  # EMPTY_TUPLE, TUPLE1 ...
    _check(folder, path, r": byte \d+: pickle refused: ")


def test_deep_lists_are_refused_by_depth(folder: Path) -> None:
    path = folder / "rank0.pkl"
    nest = b"]"
    for _ in range(5000):
        nest = b"(" + nest + b"l"  # MARK <inner> LIST: a list holding the previous one
    path.write_bytes(b"\x80\x02}(" + _str("entries") + b"(" + nest + b"lu.")
    _check(folder, path, r": entry 0: values nested deeper than 100 levels", hang_only=True)


def test_a_set_is_refused(folder: Path) -> None:
    path = folder / "rank0.pkl"
    doc = flight_recorder_doc(0)
    doc["entries"][0]["state"] = {"completed"}
    path.write_bytes(pickle.dumps(doc, protocol=4))
    _check(folder, path, r": byte \d+: pickle refused: it asks to load a set", hang_only=True)


@pytest.mark.parametrize("field", ["collective_seq_id", "time_created_ns", "duration_ms"])
def test_integer_of_5000_digits(folder: Path, field: str) -> None:
    """Was str()'s ValueError ("Exceeds the limit (4300 digits)") in the message: exit 3."""
    path = folder / "rank0.pkl"
    doc = flight_recorder_doc(0)
    doc["entries"][0][field] = 10**5000
    path.write_bytes(pickle.dumps(doc, protocol=2))
    line = _check(folder, path, rf": entry 0: '{field}' is an integer of about 5001 digits")
    assert "0000000000" not in line


def test_dims_product_is_not_computed_past_int64(folder: Path) -> None:
    path = folder / "rank0.pkl"
    doc = flight_recorder_doc(0)
    doc["entries"][1]["input_sizes"] = [[2**62] * 100_000]
    path.write_bytes(pickle.dumps(doc, protocol=2))
    _check(folder, path, r": entry 1: 'element count' is an integer of about \d+ digits")


def test_hang_with_sequence_ids_near_1e18(folder: Path) -> None:
    """Was range(lo, hi) over sequence ids: a MemoryError (exit 3) or hours."""
    for rank in (0, 1):
        doc = flight_recorder_doc(rank)
        if rank == 0:
            doc["entries"][-1]["collective_seq_id"] = 10**18
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    before = digest(folder)
    result = run_cli("hang", folder, "--format", "json")
    assert result.returncode == 4, result.stderr[-2000:]  # rank 1 never entered seq 1e18
    group = json.loads(result.stdout)["groups"][0]
    assert group["first_disagreement"] == 4
    assert group["seq_last"] == 10**18
    assert digest(folder) == before
