"""Property: every parser in ``detect.FORMATS`` either returns tables that conform to the
schemas or raises ``TraceFormatError``, on arbitrary bytes and on mutated good files.

Seeds are the inline traces of ``corpus.py`` (always) and the small real traces (when
``../shared/real_traces`` is present). Mutations: byte flips, truncation, deletion, splices
of another seed's bytes; gzip seeds are mutated inside (then re-gzipped or left plain) so
the mutations reach the parser rather than stopping at the CRC. Examples are derandomized
and few per parser, so the run is the same every time and takes seconds.
"""

from __future__ import annotations

import gzip
import importlib
import os
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest.detect import FORMATS
from tests.conftest import real_traces_dir
from tests.reliability.corpus import real_seeds, write_inline_seeds
from tests.reliability.test_hostile_pickle import dump_with

#: ``TOKENWIRE_FUZZ_EXAMPLES=5000`` explores further (random, not derandomized) by hand.
EXAMPLES = int(os.environ.get("TOKENWIRE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 60,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Starts that steer arbitrary bytes past the first check of each format.
PREFIXES = [
    b"",
    b"{",
    b'{"schemaVersion": 1, "traceEvents": [',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ',
    b'{"version": "2.10", "entries": [{"profiling_name": "nccl:all_reduce", ',
    b"\x80\x04\x95",
    b"SQLite format 3\x00",
    b'{"data":["[Broken backtraces]","NvtxEvent"]}\n{"NvtxEvent":',
    b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
    # the hostile shapes of test_hostile_*.py: a pickle whose memo shares a list 60 levels
    # deep (2**60 values), args nested past the decoder's limit, a count beyond int64
    dump_with("process_group"),
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"x": ' + b"[" * 5000,
    b"h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1" + b"0" * 20,
]


def _seed_bytes(tmp: Path) -> list[tuple[str, bytes, bool]]:
    """(name, content, was gzip) for every seed; gzip seeds decompressed."""
    paths = [p for ps in write_inline_seeds(tmp / "seeds").values() for p in ps]
    paths += [p for ps in real_seeds(real_traces_dir(), max_bytes=600_000).values() for p in ps]
    out = []
    for p in paths:
        data = p.read_bytes()
        gz = data.startswith(b"\x1f\x8b")
        out.append((p.name, gzip.decompress(data) if gz else data, gz))
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def seeds(work: Path) -> list[tuple[str, bytes, bool]]:
    return _seed_bytes(work)


def check_parse(fmt: str, path: Path, data: bytes) -> None:
    """Parse ``path`` with ``fmt``'s parser; only conforming tables or TraceFormatError."""
    path.write_bytes(data)
    module = importlib.import_module(FORMATS[fmt], "pipeline.ingest")
    try:
        result = module.parse(path)
    except TraceFormatError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        assert "\n" not in str(exc)
        return
    except Exception:  # the property under test: report the input that broke it
        keep = path.with_name(f"crash-{fmt}-{len(data)}{path.suffix}")
        keep.write_bytes(data)
        pytest.fail(f"{fmt}.parse raised on {keep}:\n{traceback.format_exc()}")
    for name, table in result.tables.items():
        conform(name, table, job="fuzz", source=fmt, file_id="0" * 16)


@pytest.mark.parametrize("fmt", list(FORMATS))
@FUZZ
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=4096))
def test_arbitrary_bytes(fmt: str, work: Path, prefix: bytes, body: bytes) -> None:
    check_parse(fmt, work / f"arbitrary-{fmt}.bin", prefix + body)


@st.composite
def mutated(draw: st.DrawFn, seeds: list[tuple[str, bytes, bool]]) -> tuple[bytes, bool]:
    """A seed's content with 1-4 mutations; whether to gzip it again."""
    name, data, gz = draw(st.sampled_from(seeds))
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "delete", "splice", "byte"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[at] = draw(st.sampled_from(b'\x00\xff"{}[],:-.0e9\n\\'))
        elif op == "truncate":
            del data[at:]
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        else:
            _, other, _ = draw(st.sampled_from(seeds))
            start = draw(st.integers(0, max(0, len(other) - 1)))
            data[at:at] = other[start : start + draw(st.integers(1, 256))]
    regzip = gz and draw(st.booleans())
    return bytes(gzip.compress(bytes(data), mtime=0) if regzip else data), regzip


@pytest.mark.parametrize("fmt", list(FORMATS))
@FUZZ
@given(data=st.data())
def test_mutated_files(fmt: str, work: Path, seeds, data: st.DataObject) -> None:
    content, gz = data.draw(mutated(seeds))
    check_parse(fmt, work / f"mutated-{fmt}{'.json.gz' if gz else '.json'}", content)
