"""tokenwire link on real traces and on the sample job, checked against what they contain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import pipeline
from pipeline.cli import cli
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT, edit_parts, tree_digest


def _linked(src: Path, tmp_path: Path, job: str) -> pipeline.dataset.handle.Dataset:
    dataset = tmp_path / job
    summary = ingest([src], dataset, job=job, jobs=1)
    assert not summary.errors
    link(dataset)
    return pipeline.open(dataset)


def test_sample_job_matches_its_model(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    mismatched = ds.sql(
        "SELECT * FROM token_wire WHERE calls <> predicted_calls OR bytes <> predicted_bytes "
        "OR predicted_bytes IS NULL"
    )
    assert mismatched.is_empty(), mismatched
    assert ds.sql("SELECT count(DISTINCT step) FROM token_wire").item() == 2
    assert ds.sql("SELECT DISTINCT tokens FROM token_wire").rows() == [(16 * 128,)]
    no_step = ds.sql("SELECT count(*) FROM collectives_linked WHERE step IS NULL").item()
    assert no_step == 0


def test_sample_dims_inferred_without_config_equal_the_layout(
    linked_sample: Path, tmp_path: Path
) -> None:
    with_config = pipeline.open(linked_sample).sql(
        "SELECT comm, parallel_dim FROM communicator_dims ORDER BY comm"
    )
    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    link(copy)
    inferred = pipeline.open(copy).sql(
        "SELECT comm, parallel_dim, dim_source FROM communicator_dims ORDER BY comm"
    )
    assert (inferred["dim_source"] != "job.yaml").all()
    assert inferred.select("comm", "parallel_dim").rows() == with_config.rows()
    by_dim = (
        pipeline.open(copy)
        .sql("SELECT parallel_dim, count(*) FROM communicator_dims GROUP BY ALL ORDER BY ALL")
        .rows()
    )
    # each process group once as pg:N (profiler) and once as an NCCL commId (logs)
    assert by_dim == [("dp", 8), ("pp", 8), ("tp", 8), ("unknown", 4), ("world", 2)]


def test_time_breakdown_adds_up(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    rows = ds.sql(
        "SELECT rank, step, window_ns, compute_ns + overlapped_comm_ns + exposed_comm_ns + idle_ns "
        "FROM time_breakdown ORDER BY rank, step"
    ).rows()
    assert [(r, s) for r, s, _, _ in rows] == [(r, s) for r in range(8) for s in (2, 3)]
    assert all(window == parts > 0 for _, _, window, parts in rows)
    comm = ds.sql("SELECT min(exposed_comm_ns + overlapped_comm_ns) FROM time_breakdown").item()
    assert comm > 0


def test_link_reads_neither_ops_nor_kernels(linked_sample: Path, tmp_path: Path) -> None:
    """What needs the ops and kernels is worked out per file at ingest: a copy of the sample
    whose ops and kernels are gone links to the same derived tables, row for row."""
    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for entry in manifest["files"].values():
        for table in ("ops", "kernels"):
            for rel in entry["parts"].pop(table, []):
                (copy / rel).unlink(missing_ok=True)  # a merged part is listed by each file
    del manifest["tables"]  # (the index of parts by table: worked out again from the files)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert pipeline.open(copy).sql("SELECT count(*) FROM ops").item() == 0
    link(copy, config=REPO_ROOT / "sample_traces" / "job.yaml")
    for table in ("collective_links", "collective_instances", "communicator_dims", "token_wire"):
        query = f"SELECT * FROM {table} ORDER BY ALL"
        before = pipeline.open(linked_sample).sql(query)
        after = pipeline.open(copy).sql(query)
        assert before.height > 0, table  # (the sample has rows in each)
        assert_frame_equal(after, before)


def test_a_job_profiled_on_some_ranks_counts_every_rank(
    linked_sample: Path, tmp_path: Path
) -> None:
    """Ranks 0-3 profiled, all 8 logged by NCCL: the calls of ranks 4-7 (a pipeline stage no
    profiled rank shares a TP or DP group with) are placed in steps through the instances
    they share with profiled ranks and their order in their own logs, so the bytes per step
    and dimension are those of the fully profiled job."""
    folder = tmp_path / "traces"
    folder.mkdir()
    sample = REPO_ROOT / "sample_traces"
    for path in [*sample.glob("rank[0-3].*.pt.trace.json.gz"), *sample.glob("*.nccl.log")]:
        (folder / path.name).symlink_to(path)
    dataset = tmp_path / "ds"
    assert not ingest([folder], dataset, job="sample", jobs=1).errors
    link(dataset, config=sample / "job.yaml")
    totals = (
        "SELECT step, parallel_dim, sum(calls), sum(bytes), sum(predicted_bytes) "
        "FROM token_wire GROUP BY ALL ORDER BY ALL"
    )
    partial, full = pipeline.open(dataset), pipeline.open(linked_sample)
    assert partial.sql(totals).rows() == full.sql(totals).rows()
    placed = partial.sql(
        "SELECT op IN ('send', 'recv'), step_from, attributed_by = 'instance', count(*) "
        "FROM collectives_linked WHERE rank >= 4 GROUP BY ALL ORDER BY ALL"
    ).rows()
    # send/recv with stage 0 take their step from it; TP and DP calls from the log order
    assert [row[:3] for row in placed] == [
        (False, "log_order", False),
        (True, "instance", True),
    ]
    # one row per collective, as in the fully profiled job: where the profiler saw one
    # rank and the log both, the profiler's row stands whole (its ranks_seen and skew)
    instances = partial.sql(
        "SELECT source, sources, ranks_seen, count(*) FROM collective_instances "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert instances == [
        ("kineto", ["kineto", "nccl_log"], 1, 64),
        ("kineto", ["kineto", "nccl_log"], 2, 148),
        ("nccl_log", ["nccl_log"], 2, 200),
    ]
    everything = "SELECT count(*) FROM collective_instances"
    assert partial.sql(everything).item() == full.sql(everything).item() == 412


def test_straggler_is_found(linked_sample: Path) -> None:
    """The generator makes rank 5 late at the forward attention all-reduce of TP group {4,5}."""
    ds = pipeline.open(linked_sample)
    row = ds.sql(
        "SELECT late_rank, count(*) FROM collective_instances WHERE source = 'kineto' AND comm = "
        "(SELECT DISTINCT comm FROM communicators WHERE source = 'kineto' AND ranks = [4, 5]) "
        "AND phase = 'forward' "
        "AND layer_kind = 'attention' GROUP BY ALL ORDER BY 2 DESC LIMIT 1"
    ).rows()
    assert row[0][0] == 5


def test_relink_replaces_and_ingest_invalidates(linked_sample: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    before = pipeline.open(copy).sql("SELECT count(*) FROM collective_links").item()
    link(copy, config=REPO_ROOT / "sample_traces" / "job.yaml")
    again = pipeline.open(copy)
    assert again.sql("SELECT count(*) FROM collective_links").item() == before
    parts = list((copy / "collective_links").rglob("*.parquet"))
    assert len(parts) == 1
    extra = tmp_path / "extra" / "rank9.json"
    extra.parent.mkdir()
    extra.write_text('{"traceEvents": [], "distributedInfo": {"rank": 9, "world_size": 10}}')
    assert not ingest([extra], copy, job="sample").errors
    assert pipeline.open(copy).sql("SELECT count(*) FROM collective_links").item() == 0
    assert not list((copy / "collective_links").rglob("*.parquet"))


def test_link_command(linked_sample: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    result = CliRunner().invoke(cli, ["link", str(copy)])
    assert result.exit_code == 0, result.output
    assert "collective_instances" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {preset: gpt2-small}\nparallel: {tp: 3}\n")
    before = tree_digest(copy)
    result = CliRunner().invoke(cli, ["link", str(copy), "--config", str(bad)])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ")
    assert tree_digest(copy) == before
    result = CliRunner().invoke(cli, ["link", str(tmp_path / "nothing")])
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path / 'nothing'}: does not exist\n"
    # a folder of other files is not a dataset, and link gives no ingest's advice
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("x")
    result = CliRunner().invoke(cli, ["link", str(tmp_path / "folder")])
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {tmp_path / 'folder'}: not a tokenwire dataset (no manifest.json)\n"
    )


@pytest.mark.parametrize("query", ["SELECT * FROM collectives_linked LIMIT 1"])
def test_linked_view_before_link_is_empty(tmp_path: Path, query: str) -> None:
    src = REPO_ROOT / "sample_traces"
    dataset = tmp_path / "ds"
    assert not ingest([next(src.glob("rank0.*"))], dataset, job="s", jobs=1).errors
    assert pipeline.open(dataset).sql(query).is_empty()


def test_clock_offsets_between_hosts(linked_sample: Path, tmp_path: Path) -> None:
    """Ranks 4-7 moved to a second host whose clock runs 5 ms ahead: link finds the offset
    from the pipeline collectives the hosts share, and little disagreement is left."""
    import polars as pl

    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    shift = 5_000_000
    second = pl.col("rank") >= 4

    def move(frame: pl.DataFrame) -> pl.DataFrame:
        times = [c for c in ("start_ns", "end_ns", "enqueue_ns") if c in frame.columns]
        frame = frame.with_columns(
            pl.when(second).then(pl.col(c) + shift).otherwise(c) for c in times
        )
        if "host" in frame.columns:
            frame = frame.with_columns(
                pl.when(second).then(pl.lit("node1")).otherwise(pl.lit("node0")).alias("host")
            )
        return frame

    for table in ("ranks", "collectives", "kernels", "ops", "steps"):
        edit_parts(copy, table, move)
    link(copy)
    ds = pipeline.open(copy)
    offsets = dict(ds.sql("SELECT rank, offset_ns FROM clock_offsets ORDER BY rank").rows())
    assert all(offsets[r] == 0 for r in range(4))
    assert all(abs(offsets[r] - shift) < 100_000 for r in range(4, 8)), offsets
    residual = ds.sql("SELECT max(residual_ns) FROM clock_offsets").item()
    assert residual < 100_000


#: Each NCCL log call that link matched (m), with itself (s) and the profiler's call (p).
_LOG_MATCHES = (
    "FROM collective_matches m "
    "JOIN collectives s ON s.job = m.job AND s.rank = m.rank AND s.source = m.source "
    "  AND s.file_id = m.file_id AND s.collective_id = m.collective_id "
    "JOIN collectives p ON p.job = m.job AND p.rank = m.rank AND p.source = m.primary_source "
    "  AND p.file_id = m.primary_file_id AND p.collective_id = m.primary_collective_id "
    "WHERE m.source = 'nccl_log'"
)


def test_nccl_logs_match_profiler_calls(linked_sample: Path) -> None:
    """The sample job's NCCL logs know each rank's communicators only by commId and their own
    rank in them; link assembles the rank sets across the logs, maps each to its process group
    and pairs every logged call with the profiler's call of the same sequence number."""
    ds = pipeline.open(linked_sample)
    logged = ds.sql("SELECT count(*) FROM collectives WHERE source = 'nccl_log'").item()
    assert logged == ds.sql("SELECT count(*) FROM collectives WHERE source = 'kineto'").item()
    pairs = ds.sql(
        "SELECT m.method, m.sizes_agree, s.seq = p.seq AS same_seq, "
        "s.op = p.op AND s.bytes = p.bytes AND s.dtype = p.dtype AS same_call " + _LOG_MATCHES
    )
    assert pairs.height == logged
    assert pairs["sizes_agree"].all()
    assert pairs["same_seq"].all() and pairs["same_call"].all()
    assert set(pairs["method"]) == {"order"}
    # matched log calls take the profiler's context: phase for all, layer where it had one
    context = ds.sql(
        "SELECT source, count(phase), count(layer) FROM collectives_linked "
        "WHERE source IN ('kineto', 'nccl_log') GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert context[0][1:] == context[1][1:] == (logged, context[0][2])
    assert context[0][2] > 0
    # send/recv peers are group ranks in a log (and in Nsight's NCCL payloads): mapped to
    # global ranks, every p2p transfer pairs its two sides, as the profiler's do
    instances = ds.sql(
        "SELECT source, op, count(*), count(*) FILTER (ranks < group_size) FROM ("
        "  SELECT source, instance_comm, instance_seq, max(group_size) AS group_size,"
        "         count(DISTINCT rank) AS ranks,"
        "         CASE WHEN min(op) = max(op) THEN min(op) ELSE 'send_recv' END AS op"
        "  FROM collectives_linked WHERE instance_seq IS NOT NULL GROUP BY ALL) "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    by_source = {s: [(op, n, partial) for src, op, n, partial in instances if src == s]
                 for s in ("kineto", "nccl_log", "nsys")}  # fmt: skip
    assert by_source["nccl_log"] == by_source["kineto"] == by_source["nsys"]
    assert all(partial == 0 for _, _, partial in by_source["kineto"])


def test_each_collective_is_one_instance_whatever_the_sources(linked_sample: Path) -> None:
    """The sample job's ranks are each traced by the profiler, logged by NCCL and exported
    by Nsight: each of its 412 collectives is one row, the profiler's, naming all three."""
    ds = pipeline.open(linked_sample)
    rows = ds.sql("SELECT source, sources, count(*) FROM collective_instances GROUP BY ALL").rows()
    assert rows == [("kineto", ["kineto", "nccl_log", "nsys"], 412)]
    per_source = ds.sql(
        "SELECT count(DISTINCT (instance_comm, instance_seq)) FROM collectives_linked "
        "WHERE source = 'kineto'"
    ).item()
    assert per_source == 412


def test_nccl_logs_fill_sizes_an_old_trace_lacks(linked_sample: Path, tmp_path: Path) -> None:
    """A profiler trace without collective sizes (PyTorch < 2.2 records none): the calls still
    pair with the log's by order and sequence number, and take the log's bytes and dtype."""
    import polars as pl

    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    kineto = pl.col("source") == "kineto"
    edit_parts(
        copy,
        "collectives",
        lambda frame: frame.with_columns(
            pl.when(~kineto).then(pl.col(c)).alias(c) for c in ("bytes", "dtype")
        ).with_columns(
            pl.when(kineto).then(pl.lit("none")).otherwise("size_source").alias("size_source")
        ),
    )
    link(copy, config=REPO_ROOT / "sample_traces" / "job.yaml")
    ds = pipeline.open(copy)
    assert ds.sql("SELECT count(bytes) FROM collectives WHERE source = 'kineto'").item() == 0
    filled = ds.sql(
        "SELECT size_source, count(*), count(bytes), count(dtype) FROM collectives_linked "
        "WHERE source = 'kineto' GROUP BY ALL"
    ).rows()
    calls = ds.sql("SELECT count(*) FROM collectives WHERE source = 'kineto'").item()
    assert filled == [("nccl_log", calls, calls, calls)]
    before = pipeline.open(linked_sample).sql(
        "SELECT parallel_dim, op, phase, bytes FROM token_wire ORDER BY ALL"
    )
    assert_frame_equal(
        ds.sql("SELECT parallel_dim, op, phase, bytes FROM token_wire ORDER BY ALL"), before
    )


@pytest.mark.parametrize("log", ["whole_run", "seq_one_off"])
def test_a_log_longer_than_the_window_matches_by_order(
    linked_sample: Path, tmp_path: Path, log: str
) -> None:
    """A log usually spans more of the run than the profiler's window. ``whole_run``: each
    NCCL log holds its calls twice over (a later copy, the same sizes, sequence numbers moved
    on), so sizes alone tie between the two copies and the sequence numbers choose: every
    profiler call pairs with the log call of its own number, the way link settles a long log
    without scoring every offset. ``seq_one_off``: the log's numbers are one ahead of the
    profiler's (a log that began a call late), so they settle nothing and the full scoring by
    sizes chooses the offset."""
    import polars as pl

    copy = tmp_path / "copy"
    shutil.copytree(linked_sample, copy)
    logged = pl.col("source") == "nccl_log"

    def longer(frame: pl.DataFrame) -> pl.DataFrame:
        later = frame.filter(logged).with_columns(
            pl.col("seq") + 1_000_000, pl.col("collective_id") + 1_000_000_000
        )
        return pl.concat([frame, later])

    def one_off(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(pl.when(logged).then(pl.col("seq") + 1).otherwise("seq"))

    edit_parts(copy, "collectives", longer if log == "whole_run" else one_off)
    link(copy, config=REPO_ROOT / "sample_traces" / "job.yaml")
    ds = pipeline.open(copy)
    profiled = ds.sql("SELECT count(*) FROM collectives WHERE source = 'kineto'").item()
    pairs = ds.sql(
        "SELECT m.primary_file_id, m.primary_collective_id, s.seq - p.seq AS seq_gap, "
        "m.sizes_agree " + _LOG_MATCHES
    )
    assert pairs.height == profiled
    # each profiler call once
    assert pairs.select("primary_file_id", "primary_collective_id").n_unique() == profiled
    assert pairs["sizes_agree"].all()
    assert set(pairs["seq_gap"]) == ({0} if log == "whole_run" else {1})


def test_an_instance_whose_ranks_disagree_takes_the_op_most_report(tmp_path: Path) -> None:
    """A desynchronized job: at one sequence number one rank of four issued another op, at
    another two ranks did. The instance takes the op most ranks report (the first by name
    of equals) and is flagged inconsistent; the instances around them are untouched."""
    import polars as pl

    from pipeline.synth.job import JobSpec, job_traces

    traces = tmp_path / "traces"
    traces.mkdir()
    for name, text in job_traces(JobSpec(tp=1, pp=1, dp=4, layers=2, global_batch=8)).items():
        (traces / name).write_text(text)
    dataset = tmp_path / "ds"
    assert not ingest([traces], dataset, job="desync", jobs=1).errors
    ds = pipeline.open(dataset)
    comm, first_seq = ds.sql(
        "SELECT comm, min(seq) FROM collectives WHERE op = 'all_reduce' GROUP BY comm "
        "ORDER BY count(*) DESC LIMIT 1"
    ).row(0)
    changed = {0: {first_seq: "all_gather", first_seq + 1: "all_gather"},
               1: {first_seq + 1: "all_gather"}}  # fmt: skip
    op = pl.col("op")
    for rank, ops in changed.items():
        for seq, new_op in ops.items():
            at = (pl.col("rank") == rank) & (pl.col("comm") == comm) & (pl.col("seq") == seq)
            op = pl.when(at).then(pl.lit(new_op)).otherwise(op)
    edit_parts(dataset, "collectives", lambda frame: frame.with_columns(op.alias("op")))
    link(dataset)
    query = (
        "SELECT seq, op, ranks_seen, consistent FROM collective_instances "
        f"WHERE comm = '{comm}' AND seq BETWEEN {first_seq} AND {first_seq + 2} ORDER BY seq"
    )
    rows = pipeline.open(dataset).sql(query).rows()
    assert rows == [
        (first_seq, "all_reduce", 4, False),
        (first_seq + 1, "all_gather", 4, False),
        (first_seq + 2, "all_reduce", 4, True),
    ]


@pytest.mark.parametrize(
    ("layout", "keys"),
    [
        # one data-parallel group's all-reduces: 4 instances of the two ranks
        ({"dp": 2}, [(None, "all_reduce", 4, 8)]),
        # a pipeline's sends and recvs: a key per direction, without a communicator
        ({"pp": 2}, [("p2p 0->1", "send", 4, 8), ("p2p 1->0", "send", 4, 8)]),
    ],
)
def test_calls_without_a_communicator_match_by_a_null_key(
    tmp_path: Path, layout: dict, keys: list
) -> None:
    """A source that names no communicator (collectives.comm NULL): the instances keep comm
    NULL (no sentinel string), every call joins its instance NULL-safe, and waits count
    each call once."""
    import polars as pl

    from pipeline.synth.job import JobSpec, job_traces

    traces = tmp_path / "traces"
    traces.mkdir()
    spec = JobSpec(**{"tp": 1, "pp": 1, "dp": 1, **layout}, layers=2, global_batch=4)
    for name, text in job_traces(spec).items():
        (traces / name).write_text(text)
    dataset = tmp_path / "ds"
    assert not ingest([traces], dataset, job="nocomm", jobs=1).errors
    no_comm = pl.lit(None, pl.String).alias("comm")
    edit_parts(dataset, "collectives", lambda frame: frame.with_columns(no_comm))
    link(dataset)
    ds = pipeline.open(dataset)
    got = ds.sql(
        "SELECT i.comm, i.op, count(DISTINCT i.seq), count(*) FROM collectives_linked l "
        "JOIN collective_instances i ON i.job = l.job AND i.source = l.source "
        "AND i.comm IS NOT DISTINCT FROM l.instance_comm AND i.seq = l.instance_seq "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert got == keys
    assert ds.sql("SELECT count(*) FROM collectives_linked WHERE comm IS NOT NULL").item() == 0
    waits = ds.sql("SELECT count(*), min(transfer_ns) FROM collective_waits").row(0)
    assert waits[0] == sum(k[3] for k in keys) and waits[1] >= 0
