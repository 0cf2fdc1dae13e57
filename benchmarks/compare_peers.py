"""tokenwire beside Holistic Trace Analysis and TraceLens on one multi-rank Kineto set: the
questions the peers answer (GPU time split into computation, exposed communication and
idle; communication overlapped with computation; who arrives last at collectives and how
long the others wait), per rank, in one Markdown table each (docs/peers.md).

    python -m benchmarks.compare_peers TRACE_DIR [--tracelens PATH]

Needs ``pip install 'tokenwire[bench]'`` (Holistic Trace Analysis 0.5.0) and a TraceLens
checkout (github.com/AMD-AGI/TraceLens, imported from ``--tracelens``). Each tool runs on
the same files; tokenwire's figures come from its own tables (``kernels``,
``time_breakdown``, ``collective_instances``, ``collective_waits``), computed where a peer's
definition differs from tokenwire's with that peer's definition too, so that the data and
the definitions can be told apart.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

import polars as pl

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link

# GPU time per rank over the whole trace (first kernel start to last kernel end), TraceLens'
# definition: union of computation kernels; communication kernels (NCCL) less what
# computation covers; idle the rest. Memcpy/memset are counted as TraceLens counts them
# (memset with computation, memcpy apart).
_GPU_TIME_SQL = """
WITH k AS (
    SELECT rank, start_ns, end_ns,
           CASE WHEN kind = 'memcpy' THEN 'memcpy'
                WHEN name ILIKE '%nccl%' THEN 'comm' ELSE 'comp' END AS what
    FROM kernels WHERE end_ns > start_ns
),
runs AS (  -- merged intervals per rank and class (gaps and islands)
    SELECT rank, what, start_ns, end_ns,
           sum(CASE WHEN start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY rank, what ORDER BY start_ns, end_ns) AS island
    FROM (SELECT *, max(end_ns) OVER (PARTITION BY rank, what ORDER BY start_ns, end_ns
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                     AS prev_end FROM k)
),
merged AS (
    SELECT rank, what, min(start_ns) AS s, max(end_ns) AS e FROM runs
    GROUP BY rank, what, island
),
exposed AS (  -- communication not covered by computation
    SELECT c.rank, sum(c.e - c.s) - coalesce(sum(
               (SELECT sum(least(c.e, p.e) - greatest(c.s, p.s)) FROM merged p
                WHERE p.rank = c.rank AND p.what = 'comp' AND p.s < c.e AND p.e > c.s)), 0)
               AS exposed_ns
    FROM merged c WHERE c.what = 'comm' GROUP BY c.rank
),
span AS (SELECT rank, max(end_ns) - min(start_ns) AS total_ns FROM k GROUP BY rank)
SELECT w.rank, w.total_ns,
       sum(m.e - m.s) FILTER (WHERE m.what = 'comp') AS comp_ns,
       sum(m.e - m.s) FILTER (WHERE m.what = 'comm') AS comm_ns,
       any_value(x.exposed_ns) AS exposed_comm_ns
FROM span w JOIN merged m USING (rank) LEFT JOIN exposed x USING (rank)
GROUP BY w.rank, w.total_ns ORDER BY w.rank
"""

# Who arrived last and how long the others waited, over the collectives matched across all
# ranks: TraceLens's wait is the last rank's kernel start minus this rank's; tokenwire's
# collective_waits measures it on the aligned clock and caps it at the call's duration.
_WAIT_SQL = """
SELECT rank, count(*) FILTER (WHERE late_rank = rank) AS times_last,
       sum(wait_ns) / 1e3 AS wait_us
FROM collective_waits GROUP BY rank ORDER BY rank
"""


def tokenwire_tables(traces: Path, work: Path) -> dict[str, pl.DataFrame]:
    """The tokenwire side: the set ingested and linked, then queried."""
    ingest([traces], work / "ds", job="peers", jobs=1)
    link(work / "ds")
    ds = pipeline.open(work / "ds")
    breakdown = ds.sql(
        "SELECT rank, sum(compute_ns) AS compute_ns, sum(overlapped_comm_ns) AS overlapped_ns, "
        "sum(exposed_comm_ns) AS exposed_ns, sum(idle_ns) AS idle_ns FROM time_breakdown "
        "GROUP BY rank ORDER BY rank"
    )
    return {"gpu": ds.sql(_GPU_TIME_SQL), "breakdown": breakdown, "waits": ds.sql(_WAIT_SQL)}


def tracelens_tables(files: list[Path]) -> dict[str, pl.DataFrame]:
    """TraceLens: GPU timeline metrics per rank and its straggler summary."""
    import orjson
    from TraceLens.NcclAnalyser.nccl_analyser import NcclAnalyser
    from TraceLens.TreePerf.gpu_event_analyser import PytorchGPUEventAnalyser

    rows = []
    for rank, path in enumerate(files):
        events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        for uid, event in enumerate(events):
            event["UID"] = uid
        m = PytorchGPUEventAnalyser(events).compute_metrics()
        rows.append({"rank": rank, **{k: float(v) for k, v in m.items()}})
    nccl = NcclAnalyser([str(p) for p in files], len(files))
    stragglers = pl.from_pandas(nccl.build_df_straggler_summary())
    return {"gpu": pl.DataFrame(rows), "waits": stragglers.sort("rank")}


def hta_tables(trace_dir: Path) -> dict[str, pl.DataFrame]:
    """Holistic Trace Analysis: temporal breakdown and communication/computation overlap."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    temporal = pl.from_pandas(analysis.get_temporal_breakdown(visualize=False))
    overlap = pl.from_pandas(analysis.get_comm_comp_overlap(visualize=False))
    return {"temporal": temporal, "overlap": overlap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, help="one Kineto trace per rank")
    parser.add_argument("--tracelens", type=Path, help="a TraceLens checkout")
    args = parser.parse_args()
    if args.tracelens:
        sys.path.insert(0, str(args.tracelens))
    files = sorted(p for p in args.traces.iterdir() if ".pt.trace.json" in p.name)
    with tempfile.TemporaryDirectory() as tmp:
        tw = tokenwire_tables(args.traces, Path(tmp))
    tl = tracelens_tables(files)
    hta = hta_tables(args.traces)
    for name, frame in (*(("tokenwire " + k, v) for k, v in tw.items()),
                        *(("TraceLens " + k, v) for k, v in tl.items()),
                        *(("HTA " + k, v) for k, v in hta.items())):  # fmt: skip
        print(f"### {name}\n")
        with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_dataframe_shape=True,
                       tbl_hide_column_data_types=True, tbl_rows=64, tbl_cols=20):  # fmt: skip
            print(frame)
        print()


if __name__ == "__main__":
    main()
