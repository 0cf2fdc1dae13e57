"""The synthetic job generator (pipeline.synth): trace shape, collectives, determinism.

Every check reads the generated files with plain ``json``/``gzip`` and compares them with the
real PyTorch traces or with the job's formulas (docs/sample-job.md), never with numbers taken
from the generator's own code.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from pipeline.synth.__main__ import main
from pipeline.synth.job import JobSpec
from pipeline.synth.scale import write_scaled_job
from pipeline.synth.writer import write_job

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "sample_traces"

# The sample job (docs/sample-job.md, sample_traces/job.yaml).
L, H, F, V, S, B, GB = 4, 256, 1024, 8192, 128, 2, 16
TP, PP, DP = 2, 2, 2
M = GB // (DP * B)  # micro-batches per step per pipeline = 4
L_ST = L // PP


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    out = tmp_path_factory.mktemp("synth")
    write_job(JobSpec(), out)
    docs = [load(p) for p in sorted(out.glob("rank*.pt.trace.json"))]
    return {d["distributedInfo"]["rank"]: d for d in docs}


def stage_params(pp_rank: int) -> int:
    """Elements one TP rank of a stage holds: GPT layer with biases, LayerNorm, learned
    positions, untied LM head (docs/model.md, split as Megatron splits it)."""
    layer = (3 * H * H // TP + 3 * H // TP) + (H * H // TP + H) + 4 * H
    layer += (F * H // TP + F // TP) + (H * F // TP + H)
    n = L_ST * layer
    if pp_rank == 0:
        n += V * H // TP + S * H
    if pp_rank == PP - 1:
        n += 2 * H + V * H // TP
    return n


def expected_per_step(rank: int) -> Counter:
    """(group desc, collective, dtype, elements) -> calls per step, from docs/sample-job.md."""
    pp_rank = rank // (TP * DP)
    first, last = pp_rank == 0, pp_rank == PP - 1
    c: Counter = Counter()
    tp_key = ("TENSOR_MODEL_PARALLEL_GROUP", "allreduce", "BFloat16", S * B * H)
    c[tp_key] = 4 * L_ST * M + (M if first else 0) + (M if last else 0)
    if last:
        c[("TENSOR_MODEL_PARALLEL_GROUP", "allreduce", "Float", S * B)] = 3 * M
        c[("DATA_PARALLEL_GROUP", "allreduce", "Float", 2)] = 1
    pp_msg = S * B * H
    sends = (M if not last else 0) + (M if not first else 0)
    c[("PIPELINE_MODEL_PARALLEL_GROUP", "send", "BFloat16", pp_msg)] = sends
    c[("PIPELINE_MODEL_PARALLEL_GROUP", "recv", "BFloat16", pp_msg)] = sends
    c[("DATA_PARALLEL_GROUP", "allreduce", "BFloat16", stage_params(pp_rank))] = 1
    return c


DTYPE_BYTES = {"BFloat16": 2, "Float": 4}


def by_step(doc: dict) -> dict[str, list[dict]]:
    """record_param_comms events per ProfilerStep (by time containment on the main thread)."""
    ev = doc["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    out: dict[str, list[dict]] = {s["name"]: [] for s in steps}
    for e in ev:
        if e.get("name") == "record_param_comms":
            for s in steps:
                if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]:
                    out[s["name"]].append(e)
    return out


def test_files_and_top_level(traces: dict[int, dict]) -> None:
    assert sorted(traces) == list(range(8))
    for rank, d in traces.items():
        assert d["schemaVersion"] == 1
        assert d["distributedInfo"]["world_size"] == 8
        assert d["distributedInfo"]["backend"] == "nccl"
        assert isinstance(d["baseTimeNanoseconds"], int)
        assert d["displayTimeUnit"] == "ms"
        assert d["traceName"].startswith(f"rank{rank}.")
        groups = {g["pg_desc"]: g["ranks"] for g in d["distributedInfo"]["pg_config"]}
        tp_rank, dp_rank, pp_rank = rank % 2, (rank // 2) % 2, rank // 4
        assert rank in groups["TENSOR_MODEL_PARALLEL_GROUP"]
        assert groups["TENSOR_MODEL_PARALLEL_GROUP"] == [rank - tp_rank, rank - tp_rank + 1]
        assert groups["DATA_PARALLEL_GROUP"] == [tp_rank + 4 * pp_rank, tp_rank + 4 * pp_rank + 2]
        assert groups["PIPELINE_MODEL_PARALLEL_GROUP"] == [
            tp_rank + 2 * dp_rank,
            tp_rank + 2 * dp_rank + 4,
        ]


def _shape_index(doc: dict) -> tuple[dict, dict]:
    keys: dict = defaultdict(set)
    args: dict = defaultdict(set)
    for e in doc["traceEvents"]:
        cat = (e.get("cat"), e.get("ph"))
        keys[cat].add(frozenset(e))
        if "args" in e:
            args[cat].add(frozenset(e["args"]))
    return keys, args


def test_event_shapes_match_real_traces(traces: dict[int, dict], real_traces: Path) -> None:
    real_keys: dict = defaultdict(set)
    real_args: dict = defaultdict(set)
    # (the A100 and B200 traces have no shapes; the recorded CPU run has forward ops with
    # both shapes and the autograd sequence number, as record_shapes writes them)
    for path in (
        real_traces / "kineto" / "a100_rank0of2_nccl_metadata.json.gz",
        real_traces / "kineto" / "b200_rank0of8_eager.json.gz",
        REPO_ROOT / "tests" / "data" / "cpu_gloo" / "tp" / "rank0.pt.trace.json.gz",
    ):
        k, a = _shape_index(load(path))
        for cat in k:
            real_keys[cat] |= k[cat]
            real_args[cat] |= a.get(cat, set())
    gen_keys, gen_args = _shape_index(traces[4])
    assert set(gen_keys) <= set(real_keys), set(gen_keys) - set(real_keys)
    for cat in gen_keys:
        assert gen_keys[cat] <= real_keys[cat], (cat, gen_keys[cat] - real_keys[cat])
        assert gen_args.get(cat, set()) <= real_args[cat], (cat, gen_args[cat] - real_args[cat])
    # the categories the issue names are all there
    for cat in (
        "cpu_op",
        "user_annotation",
        "python_function",
        "kernel",
        "cuda_runtime",
        "cuda_driver",
        "gpu_memcpy",
        "gpu_user_annotation",
        "ac2g",
        "Trace",
    ):
        assert any(c == cat for c, _ in gen_keys), cat


def test_value_types(traces: dict[int, dict]) -> None:
    for e in traces[0]["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "Trace":
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
            assert e["dur"] >= 0
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_user_annotation"):
            assert e["pid"] == 0 and e["tid"] == e["args"].get("stream", e["tid"])


def test_collectives_per_rank_per_step(traces: dict[int, dict]) -> None:
    for rank, doc in traces.items():
        steps = by_step(doc)
        assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3"]
        for events in steps.values():
            got = Counter(
                (
                    e["args"]["Process Group Description"],
                    e["args"]["Collective name"],
                    e["args"]["dtype"],
                    e["args"]["In msg nelems"],
                )
                for e in events
            )
            assert got == expected_per_step(rank), rank


def test_bytes_per_rank_per_step(traces: dict[int, dict]) -> None:
    for rank, doc in traces.items():
        for events in by_step(doc).values():
            got = sum(e["args"]["In msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]] for e in events)
            want = sum(n * k[3] * DTYPE_BYTES[k[2]] for k, n in expected_per_step(rank).items())
            assert got == want
    # docs/sample-job.md table: rank 0 and rank 4 per step
    assert sum(n * k[3] * DTYPE_BYTES[k[2]] for k, n in expected_per_step(0).items()) == 9_512_448
    assert sum(n * k[3] * DTYPE_BYTES[k[2]] for k, n in expected_per_step(4).items()) == 9_460_232


def test_kernels_carry_the_same_metadata(traces: dict[int, dict]) -> None:
    meta = (
        "Collective name",
        "In msg nelems",
        "Out msg nelems",
        "Group size",
        "dtype",
        "Process Group Name",
        "Process Group Description",
        "Process Group Ranks",
    )
    for doc in traces.values():
        ev = doc["traceEvents"]
        rpc = {e["args"]["External id"]: e for e in ev if e.get("name") == "record_param_comms"}
        nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("ncclDev")]
        assert len(nccl) == len(rpc)
        for k in nccl:
            r = rpc[k["args"]["External id"]]
            assert all(k["args"][m] == r["args"][m] for m in meta)
            assert r["ts"] <= k["ts"] or k["ts"] >= r["ts"]  # GPU runs after the enqueue
            assert k["tid"] != 7  # NCCL stream, not the compute stream


def test_flows_link_launches_to_kernels(traces: dict[int, dict]) -> None:
    doc = traces[5]
    ev = doc["traceEvents"]
    flows = defaultdict(dict)
    for e in ev:
        if e.get("cat") == "ac2g":
            flows[e["id"]][e["ph"]] = e
    calls = {
        e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }
    for k in (e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy")):
        corr = k["args"]["correlation"]
        call = calls[corr]
        assert call["name"] in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync")
        assert flows[corr]["s"]["ts"] == call["ts"] and flows[corr]["s"]["pid"] == call["pid"]
        assert flows[corr]["f"]["ts"] == k["ts"] and flows[corr]["f"]["tid"] == k["tid"]
        assert call["args"]["External id"] == k["args"]["External id"]
        assert call["ts"] <= k["ts"]


def test_cpu_ranges_nest(traces: dict[int, dict]) -> None:
    for doc in (traces[0], traces[7]):
        per_thread = defaultdict(list)
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and isinstance(e.get("pid"), int) and e["pid"] > 100:
                per_thread[e["tid"]].append(e)
        for events in per_thread.values():
            stack: list[int] = []
            ns = [(round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"]) for e in events]
            for ts, dur, name in sorted(ns, key=lambda x: (x[0], -x[1])):
                while stack and ts >= stack[-1]:
                    stack.pop()
                assert not stack or ts + dur <= stack[-1], name
                stack.append(ts + dur)


def test_module_scopes_and_embedding(traces: dict[int, dict]) -> None:
    ev = traces[0]["traceEvents"]
    mods = [e for e in ev if e.get("cat") == "python_function"]
    names = {e["name"] for e in mods}
    for n in (
        "GPTModel_0",
        "TransformerLayer_0",
        "TransformerLayer_1",
        "ParallelAttention_0",
        "ParallelMLP_1",
        "ColumnParallelLinear_3",
        "RowParallelLinear_0",
        "VocabParallelEmbedding_0",
        "LayerNorm_3",
    ):
        assert f"nn.Module: {n}" in names
    ids = {e["args"]["Python id"]: e for e in mods}
    row = next(e for e in mods if e["name"] == "nn.Module: RowParallelLinear_0")
    chain = []
    while row is not None:
        chain.append(row["name"])
        row = ids.get(row["args"]["Python parent id"])
    assert chain[:4] == [
        "nn.Module: RowParallelLinear_0",
        "nn.Module: ParallelAttention_0",
        "nn.Module: TransformerLayer_0",
        "nn.Module: TransformerBlock_0",
    ]
    emb = [
        e for e in ev if e.get("name") == "aten::embedding" and e["args"]["Input Dims"][1] == [B, S]
    ]
    assert len(emb) == 2 * M and all(e["args"]["Input Dims"][0] == [V // TP, H] for e in emb)
    last = [e for e in traces[4]["traceEvents"] if e.get("name") == "aten::embedding"]
    assert last == []
    phases = Counter(
        e["name"]
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"] in ("forward", "backward", "optimizer")
    )
    assert phases == {"forward": 2 * M, "backward": 2 * (M + 1), "optimizer": 2}


def test_collectives_end_together_and_straggler(traces: dict[int, dict]) -> None:
    def tp_kernels(rank: int) -> list[dict]:
        return [
            e
            for e in traces[rank]["traceEvents"]
            if e.get("cat") == "kernel"
            and e["args"].get("Process Group Description") == "TENSOR_MODEL_PARALLEL_GROUP"
        ]

    late = Counter()
    for a, b in ((0, 1), (4, 5)):
        ka, kb = tp_kernels(a), tp_kernels(b)
        assert len(ka) == len(kb)
        for x, y in zip(ka, kb, strict=True):
            assert abs((x["ts"] + x["dur"]) - (y["ts"] + y["dur"])) < 0.002
            if y["ts"] - x["ts"] > 50:
                late[b] += 1
            if x["ts"] - y["ts"] > 50:
                late[a] += 1
    # rank 5 reaches the attention all-reduce late in every forward (2 layers x 4 mb x 2 steps)
    assert late[5] >= 2 * M * L_ST
    assert late[5] > late[0] + late[1]


def test_sample_traces_equal_a_fresh_generation(tmp_path: Path) -> None:
    write_job(JobSpec(), tmp_path, use_gzip=True)
    fresh = {p.name: p.read_bytes() for p in tmp_path.glob("rank*")}
    bundled = {p.name: p.read_bytes() for p in SAMPLE.glob("rank*.pt.trace.json*")}
    assert sorted(fresh) == sorted(bundled)
    assert all(fresh[n] == bundled[n] for n in fresh), "regenerate: make samples"
    assert sum(len(b) for b in bundled.values()) < 10_000_000


@pytest.mark.parametrize(
    ("fmt", "pattern"), [("nccl", "rank*.nccl.log"), ("nsys", "job.nsys.sqlite")]
)
def test_sample_logs_and_exports_equal_a_fresh_generation(
    tmp_path: Path, fmt: str, pattern: str
) -> None:
    """The bundled NCCL logs (and Nsight export) are the sample job's, as make samples
    writes them."""
    write_scaled_job(JobSpec(), tmp_path, formats=[fmt])
    fresh = {p.name: p.read_bytes() for p in tmp_path.glob(pattern)}
    bundled = {p.name: p.read_bytes() for p in SAMPLE.glob(pattern)}
    assert fresh and sorted(fresh) == sorted(bundled)
    assert all(fresh[n] == bundled[n] for n in fresh), "regenerate: make samples"


def test_deterministic_and_seed_matters(tmp_path: Path) -> None:
    spec = JobSpec(steps=1, layers=2, global_batch=8)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_job(spec, a)
    write_job(spec, b)
    write_job(JobSpec(steps=1, layers=2, global_batch=8, seed=7), c)
    read = lambda d: {p.name: p.read_bytes() for p in d.iterdir()}  # noqa: E731
    assert read(a) == read(b)
    assert read(a) != read(c)


def test_cli_scale_knobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            str(tmp_path),
            "--tp",
            "1",
            "--pp",
            "4",
            "--dp",
            "2",
            "--layers",
            "8",
            "--steps",
            "1",
            "--global-batch",
            "16",
            "--gzip",
        ]
    )
    assert rc == 0 and "wrote 8 traces" in capsys.readouterr().out
    docs = [load(p) for p in sorted(tmp_path.glob("rank*.pt.trace.json.gz"))]
    assert len(docs) == 8
    # an interior stage (pp rank 1: ranks 2, 3) sends and receives once per micro-batch
    # in each direction; no TP collectives with tp=1
    m = 16 // (2 * 2)
    d = next(x for x in docs if x["distributedInfo"]["rank"] == 2)
    got = Counter(
        e["args"]["Collective name"]
        for e in d["traceEvents"]
        if e.get("name") == "record_param_comms"
    )
    assert got == {"send": 2 * m, "recv": 2 * m, "allreduce": 1}
    assert main([str(tmp_path), "--layers", "3"]) == 2


def test_a_job_on_two_hosts_names_each_host_one_way_in_every_source(tmp_path: Path) -> None:
    """16 ranks, 8 a host: one Nsight export per host, named as the NCCL logs name it, and
    the dataset counts two hosts."""
    import pipeline
    from pipeline.ingest.run import ingest

    spec = JobSpec(dp=4, steps=1, layers=2, global_batch=16, straggler_rank=None)
    written = write_scaled_job(spec, tmp_path / "job", formats=["nccl", "nsys"])
    assert sorted(p.name for p in written["nsys"]) == [
        "job.node0.nsys.sqlite",
        "job.node1.nsys.sqlite",
    ]
    summary = ingest([tmp_path / "job"], tmp_path / "ds", job="j", jobs=1)
    assert not summary.errors
    ds = pipeline.open(tmp_path / "ds")
    named = ds.sql("SELECT DISTINCT source, host FROM ranks ORDER BY ALL").rows()
    assert named == [
        ("nccl_log", "node0"),
        ("nccl_log", "node1"),
        ("nsys", "node0"),
        ("nsys", "node1"),
    ]
    hosts = ds.sql("SELECT host, count(*) AS n FROM rank_hosts GROUP BY ALL ORDER BY ALL").rows()
    assert hosts == [("node0", 8), ("node1", 8)]


def test_backward_nodes_carry_the_sequence_number_of_their_forward_op(
    traces: dict[int, dict],
) -> None:
    """As PyTorch records them: the forward op that creates a node and the node's
    evaluate_function share its sequence number (forward thread id 0 on the forward op)."""
    for rank in (0, 4):
        ops = [e for e in traces[rank]["traceEvents"] if e.get("cat") == "cpu_op"]
        forward = Counter(
            e["args"]["Sequence number"]
            for e in ops
            if "Sequence number" in e["args"] and e["args"]["Fwd thread id"] == 0
        )
        nodes = [
            e["args"]["Sequence number"]
            for e in ops
            if e["name"].startswith("autograd::engine::evaluate_function:")
        ]
        assert nodes and set(forward.values()) == {1}
        assert Counter(nodes) == forward  # every node once, from its one forward op
