"""One rule for a rank read from a file name, shared by every parser whose trace may not
say its rank (Kineto, flight recorder, Nsight)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.ingest.values import rank_from_file_name

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank0.flight_recorder.json.gz", 0),
        ("rank-12.json", 12),
        ("nccl_trace_rank_7", 7),
        ("fr_dump_3.pkl", 3),
        ("dump15", 15),
        ("dump.json", None),
        ("worker3.json", 3),
        ("rank-5.pt.trace.json", 5),
        ("trace_7.json", 7),
        ("worker0_step_12.pt.trace.json", 0),  # the worker tag wins over the step number
        ("host_1234.1733430000.pt.trace.json.gz", 1234),
        ("job_rank5.sqlite", 5),
        ("profile_3.sqlite", 3),
        ("rank" + "9" * 30 + ".json", None),  # beyond int64: no rank
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_file_name(name) == rank


#: Patterns about ranks that are not about file names: ``--rank N`` on a command line, a
#: version-2 dataset's ``rank=<N>`` part folder.
_NOT_FILE_NAMES = {"ingest/nsys/ranks.py": 1, "dataset/location.py": 1}


def test_no_parser_has_a_rule_of_its_own() -> None:
    """A second pattern for ranks in file names would let two parsers disagree again."""
    rank_pattern = re.compile(r"re\.compile\(.*rank.*\\d", re.IGNORECASE)
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        hits = sum(bool(rank_pattern.search(line)) for line in path.read_text().splitlines())
        if hits and rel != "ingest/values.py":
            found[rel] = hits
    assert found == _NOT_FILE_NAMES
