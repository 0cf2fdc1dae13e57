"""tokenwire export on real traces (../shared/real_traces): a GPU job of 8 ranks and a CPU
(gloo) pipeline job, checked against their linked tables and the trace event format. Without
that folder this module is skipped, once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

import pipeline
from pipeline.export import Scope, export_timeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import real_traces_absent
from tests.export.trace_format import SCHEMA, enclosing, improper_nesting, slices_by_track

if (absent := real_traces_absent()) is not None:
    pytest.skip(absent, allow_module_level=True)


@pytest.mark.parametrize("folder", ["kineto/dlrm_v100_8ranks", "kineto_cpu_gloo/pp/ws2"])
def test_real_job_exports_each_collective_once(real_traces: Path, tmp_path: Path, folder: str):
    dataset = tmp_path / "ds"
    assert not ingest([real_traces / folder], dataset, job="real", jobs=1).errors
    link(dataset)
    out = tmp_path / "t.json"
    export_timeline(dataset, output=out, scope=Scope(kernels=True, ops=True))
    trace = json.loads(out.read_text())
    jsonschema.validate(trace, SCHEMA)
    events = trace["traceEvents"]
    calls = pipeline.open(dataset).sql(
        "SELECT rank, count(*) AS n FROM collectives WHERE source = 'kineto' GROUP BY rank"
    )
    got = Counter(e["pid"] for e in events if e["ph"] == "X" and e["cat"] == "collective")
    assert got == dict(calls.rows())
    # collectives, kernels, steps and phases nest on their tracks; host ranges overlap where
    # the profiler recorded them so (a record_function range that ends inside an op)
    ours = {"collective", "kernel", "gpu_memcpy", "gpu_memset", "step", "phase"}
    for a, b in improper_nesting(events):
        assert not {a["cat"], b["cat"]} & ours
    tracks = slices_by_track(events)
    for e in events:
        if e["ph"] in "sf":
            assert enclosing(tracks, e)["cat"] == "collective"
