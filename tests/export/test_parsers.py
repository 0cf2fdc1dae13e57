"""The exported timeline read by a parser tokenwire did not write: Holistic Trace Analysis's
(its Kineto trace parser; `make venv` installs it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pipeline.export import Scope, export_timeline


@pytest.mark.parametrize("name", ["sample.json", "sample.json.gz"])
def test_hta_reads_every_complete_event(linked: Path, tmp_path: Path, whole: dict, name: str):
    trace = pytest.importorskip(
        "hta.common.trace",
        reason="Holistic Trace Analysis is not installed (make venv installs it)",
    )
    out = tmp_path / name
    export_timeline(linked, output=out, scope=Scope())
    meta, frame, symbols = trace.parse_trace_file(str(out))
    names = symbols.get_sym_table()
    complete = [e for e in whole["traceEvents"] if e["ph"] == "X"]
    # HTA keeps the events with a duration (complete events), drops metadata and flows
    assert len(frame) == len(complete) == 824 + 16 + 168
    assert Counter(frame["cat"].map(names.__getitem__)) == Counter(e["cat"] for e in complete)
    assert Counter(frame["name"].map(names.__getitem__)) == Counter(e["name"] for e in complete)
    assert Counter(frame["pid"]) == Counter(e["pid"] for e in complete)
    # the stream number, which HTA reads from args like the profiler's
    collectives = frame[frame["cat"].map(names.__getitem__) == "collective"]
    assert set(collectives["stream"]) == {20, 28, 32}
    assert meta["otherData"]["job"] == "sample"
