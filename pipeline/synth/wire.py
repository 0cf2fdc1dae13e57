"""The public facts the sample generator writes its bytes and times from, stated here on their
own: the generator is the second witness the tests compare tokenwire's output with, so it
takes no number from the code under test (``pipeline.vocab``, ``pipeline.model``).
A sample made from the package's own bus factor or element sizes would agree with the package
even where both were wrong. ``tests/synth/test_wire_facts.py`` checks that the two statements
agree.

- Element sizes: the widths of the formats themselves (IEEE 754 binary32, 32 bits; bfloat16,
  the top 16 bits of a binary32; a 32-bit two's-complement integer), what PyTorch's
  ``Tensor.element_size()`` gives for ``torch.bfloat16``, ``torch.float32``, ``torch.int32``.
- Ring bytes: what each rank sends per byte of message on a ring of ``n`` ranks, nccl-tests'
  bus-bandwidth factor (NVIDIA/nccl-tests doc/PERFORMANCE.md, "Bus bandwidth"): an all-reduce
  is a reduce-scatter then an all-gather, each rank sending ``n - 1`` chunks of ``S / n`` in
  each, ``2 (n - 1) S / n``; an all-gather or reduce-scatter one of those halves; a broadcast
  forwards the message once, as does each side of a send/recv.
- NCCL's names: the function names of its ``<Func>: opCount`` INFO lines and kernel symbols
  (NCCL src/collectives.cc, ``ncclFuncToString``).
"""

from __future__ import annotations

#: Bytes of one element of each torch dtype the sample job uses (job.DTYPE's keys).
ELEMENT_BYTES = {"bf16": 2, "fp32": 4, "int32": 4}

#: op -> NCCL's function name (ncclFuncToString).
NCCL_FUNCS = {
    "all_reduce": "AllReduce",
    "broadcast": "Broadcast",
    "send": "Send",
    "recv": "Recv",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
}


def ring_bytes_per_byte(op: str, n: int) -> float:
    """Bytes each of ``n`` ranks sends per byte of an ``op`` message on a ring (module
    docstring: nccl-tests doc/PERFORMANCE.md)."""
    if op == "all_reduce":  # (a reduce-scatter, then an all-gather)
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):  # (n - 1 chunks of S / n: all but its own)
        return (n - 1) / n
    if op in ("broadcast", "send", "recv"):
        return 1.0
    raise ValueError(f"the sample job issues no {op}")
