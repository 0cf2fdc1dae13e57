"""Write small Kineto traces with the structure of DeepSeek's MoE profiles, for
``tests/data/deepep``: DeepEP's kernels (``deep_ep::internode::dispatch``, ``combine``,
``notify_dispatch``, ``cached_notify``, ``deep_ep::layout::get_dispatch_layout``), which
carry no collective arguments and are launched under no host op that records a buffer, on a
communication stream beside the compute stream.

- ``train/``: DualPipe's overlapped pair of a forward and a backward chunk, in the order of
  DeepSeek's public training profile (github.com/deepseek-ai/profile-data, ``train.json``):
  under ``1F1B``, per layer ``combine(B)``, ``attn(F)``, ``mlp(B)``, ``dispatch(F)``,
  ``dispatch(B)``, ``mlp(W)``, ``mlp(F)``, ``attn(B)``, ``attn(W)``, ``combine(F)``; the
  backward chunk walks the layers from the last. The backward of combine runs DeepEP's
  cached dispatch kernel, the backward of dispatch its combine kernel.
- ``serve/``: a serving (prefill) step of two micro-batches, the dispatch and combine of one
  overlapping the attention and experts of the other (DeepSeek-V3 inference, arXiv:2412.19437
  section 3.4), each layer in ``nn.Module`` scopes, each part in a ``<part>(F)`` range.

Four ranks on two hosts (``host_name`` node0, node1), EP 4, two MoE layers per chunk; each
folder has the ``job.yaml`` that describes its job. Deterministic: the same files every run.

    python scripts/make_deepep_traces.py -o tests/data/deepep
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from pipeline.synth.kineto import H100_PROPERTIES, KinetoTrace, render_trace

WORLD, GPUS_PER_NODE, LAYERS = 4, 2, 2
BASE_TIME_NS = 1_764_547_200_000_000_000
CPU_TID, COMPUTE, COMM = 1166, 7, 27
NODES = WORLD // GPUS_PER_NODE

_EP = "deep_ep::internode"
KERNELS = {
    "cached_notify": f"void {_EP}::cached_notify<false>(int, int, int, int, int*, int, int, "
    "int const*, int const*, int*, void*, void**, int**, int, int, int, int*, bool, int)",
    "notify_dispatch": f"void {_EP}::notify_dispatch<false, {NODES}>(int const*, long*, int, "
    "int const*, int*, int const*, int*, int, int, int, int, int, int*, int*, int*, int*, void*, "
    "int, int, void**, int**, int, int)",
    "dispatch": f"void {_EP}::dispatch<false, {NODES}, false, 8>(int4*, float*, long*, float*, "
    f"{_EP}::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, "
    "int*, int*, int const*, int const*, int const*, int const*, int, int, int, int, int, "
    "bool const*, void*, int, void**, int, int, int)",
    "cached_dispatch": f"void {_EP}::dispatch<false, {NODES}, true, 8>(int4*, float*, long*, "
    f"float*, {_EP}::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, "
    "int*, int*, int*, int const*, int const*, int const*, int const*, int, int, int, int, int, "
    "bool const*, void*, int, void**, int, int, int)",
    "combine": f"void {_EP}::combine<false, {NODES}, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, "
    f"bool const*, int4 const*, float const*, int const*, int const*, {_EP}::SourceMeta const*, "
    "long const*, int const*, int const*, int, int, int, int, void*, int, int, void**, int, int, "
    "int, int)",
    "layout": "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, "
    "int*, bool*, int, int, int, int)",
    "attn": "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t>, false, true, false, false, true, false, false>(Flash_fwd_params)",
    "attn_bwd": "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, "
    "64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, false, false, false, false, "
    "false>(Flash_bwd_params)",
    "gemm": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
}
#: The kernels of each part of a layer, per pass (train) and their streams.
TRAIN_PARTS = {
    ("combine", "B"): ("cached_notify", "cached_dispatch"),
    ("attn", "F"): ("attn",),
    ("mlp", "B"): ("gemm",),
    ("dispatch", "F"): ("layout", "notify_dispatch", "dispatch"),
    ("dispatch", "B"): ("cached_notify", "combine"),
    ("mlp", "W"): ("gemm",),
    ("mlp", "F"): ("gemm",),
    ("attn", "B"): ("attn_bwd",),
    ("attn", "W"): ("gemm",),
    ("combine", "F"): ("cached_notify", "combine"),
}
COMM_KERNELS = {"cached_notify", "notify_dispatch", "dispatch", "cached_dispatch", "combine"}


class Rank:
    """One rank's trace being written: a CPU cursor and when each stream is free."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.trace = KinetoTrace(pid=CPU_TID, device=rank % GPUS_PER_NODE, base_time_ns=0)
        self.t = 10_000 + 1_000 * rank  # ns: the ranks start a little apart
        self.free = {COMPUTE: 0, COMM: 0}

    def launch(self, kernel: str) -> None:
        stream = COMM if kernel in COMM_KERNELS else COMPUTE
        dur = {"dispatch": 40_000, "cached_dispatch": 30_000, "combine": 45_000,
               "notify_dispatch": 8_000, "cached_notify": 3_000}.get(kernel, 60_000)  # fmt: skip
        start = max(self.t + 4_000, self.free[stream])
        self.trace.launch_kernel(
            api="cudaLaunchKernel", tid=CPU_TID, call_ts=self.t, call_dur=3_000,
            external_id=self.trace.next_external_id(), kernel=KERNELS[kernel], stream=stream,
            start=start, dur=dur, grid=(20, 1, 1), block=(320, 1, 1), regs=56, smem=0,
        )  # fmt: skip
        self.free[stream] = start + dur
        self.t += 5_000

    def part(self, name: str, kernels: tuple[str, ...]) -> None:
        ev, _ = self.trace.range_event("user_annotation", name, CPU_TID, self.t)
        self.t += 1_000
        for k in kernels:
            self.launch(k)
        self.trace.close(ev, self.t)
        self.t += 1_000

    def module(self, name: str, module_id: int):
        ev = self.trace.module_event(name, module_id, CPU_TID, self.t)
        self.t += 500
        return ev

    def end_module(self, ev) -> None:
        self.trace.end_module(ev, self.t)
        self.t += 500

    def finish(self, out: Path) -> None:
        end = max(self.t, *self.free.values()) + 10_000
        tr = self.trace
        tr.events.extend(tr.metadata_events(0, {CPU_TID: "python"}, [COMPUTE, COMM], 1))
        tr.events.extend(tr.span_events(0, end))
        top = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, **H100_PROPERTIES}],
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": WORLD},
            "baseTimeNanoseconds": BASE_TIME_NS,
            "host_name": f"node{self.rank // GPUS_PER_NODE}",
        }
        text = render_trace(top, tr.events, f"rank{self.rank}.pt.trace.json")
        path = out / f"rank{self.rank}.pt.trace.json.gz"
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(text.encode())


def train(rank: int, out: Path) -> None:
    """DualPipe's overlapped forward and backward chunk of LAYERS MoE layers."""
    r = Rank(rank)
    step, _ = r.trace.range_event("user_annotation", "ProfilerStep#1", CPU_TID, r.t)
    r.t += 1_000
    pair, _ = r.trace.range_event("user_annotation", "1F1B", CPU_TID, r.t)
    r.t += 1_000
    for _layer in range(LAYERS):
        for (name, pass_), kernels in TRAIN_PARTS.items():
            r.part(f"{name}({pass_})", kernels)
    r.trace.close(pair, r.t)
    r.t += 1_000
    r.trace.close(step, r.t)
    r.finish(out)


def serve(rank: int, out: Path) -> None:
    """A prefill step of two micro-batches: one's dispatch and combine beside the other's
    attention and experts."""
    r = Rank(rank)
    step, _ = r.trace.range_event("user_annotation", "ProfilerStep#1", CPU_TID, r.t)
    r.t += 1_000
    moe = ("dispatch(F)", ("layout", "notify_dispatch", "dispatch"))
    order = [  # (micro-batch, part): the CPU issues them so, the streams overlap them
        (0, ("attn(F)", ("attn",))), (0, moe), (1, ("attn(F)", ("attn",))),
        (0, ("mlp(F)", ("gemm",))), (1, moe), (0, ("combine(F)", ("cached_notify", "combine"))),
        (1, ("mlp(F)", ("gemm",))), (1, ("combine(F)", ("cached_notify", "combine"))),
    ]  # fmt: skip
    for layer in range(LAYERS):
        decoder = r.module(f"DeepseekV3DecoderLayer_{layer}", 100 + layer)
        for _mb, (name, kernels) in order:
            scope = "DeepseekV3MoE" if name != "attn(F)" else "DeepseekV3Attention"
            ev = r.module(f"{scope}_{layer}", 200 + 2 * layer + (scope == "DeepseekV3MoE"))
            r.part(name, kernels)
            r.end_module(ev)
        r.end_module(decoder)
    r.trace.close(step, r.t)
    r.finish(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    for name, write in (("train", train), ("serve", serve)):
        folder = args.output / name
        folder.mkdir(parents=True, exist_ok=True)
        for rank in range(WORLD):
            write(rank, folder)


if __name__ == "__main__":
    main()
